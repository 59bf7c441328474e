package benchcli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/schema"
	"github.com/semaq/semaq/semaq"
)

func newBenchIngestCmd(e *env) *cobra.Command {
	def := bench.DefaultIngestConfig()
	cfg := def
	var (
		jsonFile    string
		quiet       bool
		rates       string
		schemaFile  string
		schemaType  string
		payloadFile string
		ceiling     bool
		policyFile  string
	)
	cmd := &cobra.Command{
		Use:   "ingest",
		Short: "Publish throughput and latency: through the ingress vs straight into JetStream",
		Long: `Publish to a SemaQ stream through the semantic ingress and to a raw JetStream
stream with the same storage settings, from nats.go clients over loopback
TCP. Each target gets a warm-up, then a throughput phase (asynchronous
publishes, at most --window unacknowledged per publisher, acknowledged
messages counted), a latency phase (sequential synchronous publishes in an
HDR histogram) and, for each of --rates, a paced phase (asynchronous
publishes at that offered rate, open loop, each ack timed). With --e2e a
consumer on each stream (a pull consumer, as the SDK's Subscribe makes)
receives the paced messages, and each is also timed from its publish to
its receipt: the end-to-end latency. Every phase is
--duration long per target and rate, cut into --rounds slices run in
alternating target order.

--sync interval: both streams on one embedded broker, no fsync before acks.
--sync always: the SemaQ stream has durability fsync (acks group-committed
by the ingress); the raw stream runs on a second embedded nats-server with
JetStream sync_always (one fsync per message), the durable baseline.

--schema FILE: register FILE in the broker's schema registry and bind the
SemaQ stream to it, so the ingress validates every message. A second SemaQ
stream without the schema (semaq-noschema) is measured beside it, which
shows what enforcement costs in the same run; the raw stream validates
nothing. Every target sends --payload, a JSON sample that must match the
schema: as is for JSON Schema, or the Avro datum or Protobuf message (the
file's first) in JSON form, encoded and sent in Confluent's wire format.
Without --payload, FILE's sibling NAME.sample.json is used. --size pads the
sample's longest string; without it the sample goes as is. bench/schemas/
has a ready-made inference request for each format. The report adds the
in-process cost of validating one payload.

--ceiling (with --sync always): also measure a SemaQ stream with durability
interval (semaq-interval) and a raw JetStream stream without sync_always
(jetstream-interval) on the broker, and print the ceiling: raw without
fsync over raw sync_always is the most any group commit can gain on this
disk, and SemaQ fsync over SemaQ interval is the group commit's efficiency.

The table goes to stdout, progress to stderr; --json writes the report.`,
		Example: `  semaq bench ingest
  semaq bench ingest --sync always --duration 10s --json ingest.json
  semaq bench ingest --sync always --ceiling --rates none
  semaq bench ingest --sync interval --rates 1000,10000
  semaq bench ingest --e2e --rates 1000,10000 --duration 3s
  semaq bench ingest --targets semaq --size 4096 --publishers 4
  semaq bench ingest --schema bench/schemas/inference-request.json
  semaq bench ingest --schema bench/schemas/inference-request.avsc --size 1024
  semaq bench ingest --schema my.json --payload my-request.json
  semaq bench ingest --schema bench/schemas/inference-request.json --size 1024 --routes 10`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for i, t := range cfg.Targets {
				cfg.Targets[i] = strings.TrimSpace(t)
			}
			var err error
			if cfg.Rates, err = parseRates(rates, cfg.Sync, cmd.Flags().Changed("rates")); err != nil {
				return err
			}
			if cfg.E2E && !cmd.Flags().Changed("rates") {
				cfg.Rates = slices.Clone(bench.DefaultRates)
			}
			if err := readPayload(&cfg, schemaFile, schemaType, payloadFile, cmd.Flags().Changed("schema-type"), cmd.Flags().Changed("size")); err != nil {
				return err
			}
			if policyFile != "" {
				if cfg.Policy, err = readPolicy(policyFile); err != nil {
					return err
				}
			}
			if (cfg.Schema != nil || cfg.Policy != nil) && !cmd.Flags().Changed("targets") {
				cfg.Targets = slices.Clone(bench.SchemaTargets)
			}
			if ceiling {
				if cfg.Sync != broker.SyncAlways || cmd.Flags().Changed("targets") || cfg.Schema != nil {
					return errors.New("--ceiling goes with --sync always, without --targets or --schema")
				}
				cfg.Targets = slices.Clone(bench.CeilingTargets)
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			out, err := openReport(jsonFile, e.stdout)
			if err != nil {
				return err
			}
			defer out.abort()
			if !quiet {
				cfg.Progress = e.stderr
			}
			rep, err := bench.RunIngest(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if err := out.write(rep); err != nil {
				return err
			}
			if jsonFile == "-" {
				return nil
			}
			return rep.WriteTable(e.stdout)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&cfg.Targets, "targets", def.Targets, "targets to measure, comma-separated: "+strings.Join(bench.TargetNames, ", ")+
		" (semaq-noschema: with --schema; default with --schema: "+strings.Join(bench.SchemaTargets, ",")+")")
	f.DurationVar(&cfg.Duration, "duration", def.Duration, "measured time of each phase (throughput, latency) per target")
	f.DurationVar(&cfg.Warmup, "warmup", def.Warmup, "unmeasured publishing per target before measuring")
	f.IntVar(&cfg.Size, "size", def.Size, "message payload in bytes (envelope headers come on top); with --payload, the size its longest string is padded to (not given: the payload as is)")
	f.StringVar(&cfg.Sync, "sync", def.Sync, "durability measured: interval (no fsync before acks) or always (SemaQ group commit against JetStream sync_always)")
	f.StringVar(&rates, "rates", "", "offered loads of the paced phase in msgs/s, comma-separated, or none (default: "+formatRates(bench.DefaultRates)+" with --sync always or --e2e, none otherwise)")
	f.BoolVar(&cfg.E2E, "e2e", def.E2E, "also time each paced message from its publish to its receipt by a consumer of the stream (a pull consumer as client.Subscribe makes; default --rates then "+formatRates(bench.DefaultRates)+")")
	f.IntVar(&cfg.Window, "window", def.Window, "most unacknowledged asynchronous publishes per publisher")
	f.IntVar(&cfg.Publishers, "publishers", def.Publishers, "concurrent publisher connections per target in the throughput phase")
	f.StringVar(&cfg.IngressTransport, "ingress-transport", "", "the broker's ingress transport: pipe (nats-server's in-process connection) or tcp (loopback TCP to the client port); empty: the broker's default")
	f.IntVar(&cfg.IngressShards, "ingress-shards", 0, "run the broker's ingress on this many shards (0: the broker's default by cores)")
	f.IntVar(&cfg.Rounds, "rounds", def.Rounds, "slices of each phase per target, run in alternating target order")
	f.BoolVar(&cfg.TraceParent, "traceparent", def.TraceParent, "give every message a sampled W3C traceparent (--traceparent=false: none)")
	f.StringVar(&schemaFile, "schema", "", "enforce this schema on the SemaQ stream: JSON Schema, Avro (.avsc) or Protobuf (.proto) file")
	f.StringVar(&schemaType, "schema-type", "", "type of --schema: json, avro or protobuf (default: from the extension .json, .avsc, .proto; else json)")
	f.StringVar(&payloadFile, "payload", "", "JSON sample every message carries, valid under --schema (default with --schema: NAME.sample.json beside it)")
	f.StringVar(&policyFile, "policy", "", "add this policy rule (JSON, as `semaq policy get --json` shows one; bench/policies/ has the PII rule) on the SemaQ target's subjects; semaq-noschema measures without it")
	f.IntVar(&cfg.Routes, "routes", def.Routes, "route rules on each SemaQ target's subject, none matching its messages, so the ingress evaluates them all (0..100)")
	f.StringVar(&cfg.DataDir, "data", "", "broker data directory, empty or new, kept afterwards (default: a temporary directory, removed afterwards)")
	f.StringVar(&jsonFile, "json", "", `write the report as JSON to this file ("-": stdout, instead of the table)`)
	f.BoolVar(&ceiling, "ceiling", false, "with --sync always: also measure "+bench.TargetSemaqInterval+" and "+bench.TargetJetStreamInterval+" (no fsync) and print the disk's ceiling and the group commit's efficiency")
	f.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	return cmd
}

// readPolicy reads a policy rule from file.
func readPolicy(file string) (*semaq.PolicyRule, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	var rule semaq.PolicyRule
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rule); err != nil {
		return nil, fmt.Errorf("--policy %s: not a policy rule: %v", file, err)
	}
	if rule.Name == "" {
		return nil, fmt.Errorf("--policy %s: the rule has no name", file)
	}
	return &rule, nil
}

// readPayload reads --schema and --payload into cfg. Without --size, a
// payload is sent as is (cfg.Size 0).
func readPayload(cfg *bench.IngestConfig, schemaFile, schemaType, payloadFile string, typeGiven, sizeGiven bool) error {
	if schemaFile == "" && typeGiven {
		return errors.New("--schema-type needs --schema")
	}
	if schemaFile != "" {
		typ, err := schemaTypeOf(schemaFile, schemaType, typeGiven)
		if err != nil {
			return err
		}
		text, err := os.ReadFile(schemaFile)
		if err != nil {
			return fmt.Errorf("--schema: %w", err)
		}
		cfg.Schema = &bench.SchemaConfig{Type: typ, Text: string(text), File: schemaFile}
		if payloadFile == "" {
			payloadFile = strings.TrimSuffix(schemaFile, filepath.Ext(schemaFile)) + ".sample.json"
			if _, err := os.Stat(payloadFile); err != nil {
				return fmt.Errorf("--schema %s needs a sample payload that matches it: give --payload FILE (there is no %s)", schemaFile, payloadFile)
			}
		}
	}
	if payloadFile == "" {
		return nil
	}
	b, err := os.ReadFile(payloadFile)
	if err != nil {
		return fmt.Errorf("--payload: %w", err)
	}
	cfg.Payload, cfg.PayloadFile = b, payloadFile
	if !sizeGiven {
		cfg.Size = 0
	}
	return nil
}

// schemaTypeOf is --schema-type, else the type the file's extension
// names, else JSON.
func schemaTypeOf(file, typ string, given bool) (schema.Type, error) {
	if !given {
		switch strings.ToLower(filepath.Ext(file)) {
		case ".avsc":
			return schema.TypeAvro, nil
		case ".proto":
			return schema.TypeProtobuf, nil
		}
		return schema.TypeJSON, nil
	}
	switch strings.ToLower(strings.TrimSpace(typ)) {
	case "json":
		return schema.TypeJSON, nil
	case "avro":
		return schema.TypeAvro, nil
	case "protobuf", "proto":
		return schema.TypeProtobuf, nil
	}
	return "", fmt.Errorf("--schema-type: %q is not json, avro or protobuf", typ)
}

// parseRates reads --rates. Not given, it is bench.DefaultRates with sync
// always and none otherwise.
func parseRates(s, sync string, given bool) ([]int, error) {
	if !given {
		if sync == broker.SyncAlways {
			return slices.Clone(bench.DefaultRates), nil
		}
		return nil, nil
	}
	if s = strings.TrimSpace(s); s == "none" || s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%w: rates: %q is not a number of msgs/s", bench.ErrBadConfig, strings.TrimSpace(f))
		}
		out = append(out, n)
	}
	return out, nil
}

func formatRates(rates []int) string {
	s := make([]string, len(rates))
	for i, r := range rates {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ",")
}
