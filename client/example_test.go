package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/semaq"
)

// The examples run against a broker of their own (startBroker); a program
// connects to one it did not start, with client.Connect(ctx, "") for
// $SEMAQ_URL or nats://127.0.0.1:4222.

// Publish through the ingress: the options set the semantic envelope, and
// the ack says where the message is stored. A message the ingress refuses
// is not stored, and the error names the header.
func ExampleClient_Publish() {
	url, stop := startBroker()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Connect(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.inference.>"}}); err != nil {
		log.Fatal(err)
	}

	ack, err := c.Publish(ctx, "ai.inference.llm", []byte(`{"prompt":"Explain entanglement"}`),
		client.WithModel("llama3-70b"), client.WithPriority(semaq.PriorityHigh), client.WithTenant("acme"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stored in %s at seq %d\n", ack.Stream, ack.Sequence)

	_, err = c.Publish(ctx, "ai.inference.llm", []byte(`{}`), client.WithHeader("AI-Priority", "urgent"))
	if errors.Is(err, semaq.ErrEnvelope) {
		fmt.Println("refused:", err)
	}
	// Output:
	// stored in AI at seq 1
	// refused: invalid header AI-Priority: unknown priority "urgent" (use critical, high, normal, low, bulk or 0-9)
}

// A filtered subscription: the broker evaluates the CEL expression on
// every message and sends only those that match (docs/filtering.md).
func ExampleClient_Subscribe_filter() {
	url, stop := startBroker()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Connect(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "SCORES", Subjects: []string{"ai.scores"}}); err != nil {
		log.Fatal(err)
	}
	for _, score := range []string{`{"confidence":0.4}`, `{"confidence":0.9}`, `{"confidence":0.7}`, `{"confidence":0.95}`} {
		if _, err := c.Publish(ctx, "ai.scores", []byte(score)); err != nil {
			log.Fatal(err)
		}
	}

	sub, err := c.Subscribe(ctx, "ai.scores", client.WithFilter("payload.confidence > 0.85"), client.WithMaxMessages(2))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for {
		msg, err := sub.Next(ctx)
		if errors.Is(err, client.ErrSubscriptionDone) {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("seq %d: %s\n", msg.Seq, msg.Data)
		if err := msg.Ack(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// seq 2: {"confidence":0.9}
	// seq 4: {"confidence":0.95}
}

// A worker fetches work from a queue: the dispatcher picks the jobs
// (deadline, priority, tenant fair share, model affinity), and the worker
// answers each one (docs/queues.md).
func ExampleClient_Fetch() {
	url, stop := startBroker()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Connect(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.AddQueue(ctx, semaq.QueueConfig{Name: "INFER", Subjects: []string{"ai.infer.>"}}); err != nil {
		log.Fatal(err)
	}
	// The request, as any client publishes it.
	if _, err := c.Publish(ctx, "ai.infer.llama3", []byte(`{"prompt":"hi"}`),
		client.WithMsgID("req-1"), client.WithTenant("acme"), client.WithPromptTokens(900)); err != nil {
		log.Fatal(err)
	}

	jobs, err := c.Fetch(ctx, "INFER", client.FetchMax(8), client.FetchWait(5*time.Second),
		client.FetchLabels(map[string]string{"model": "llama3"}))
	if err != nil {
		log.Fatal(err)
	}
	for _, job := range jobs {
		fmt.Printf("%s %s: %s (%d prompt tokens)\n", job.Subject, job.ID, job.Data, job.Tokens)
		if err := job.Ack(ctx, client.AckOutputTokens(12)); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// ai.infer.llama3 req-1: {"prompt":"hi"} (900 prompt tokens)
}

// The answer to a request as a token stream: the worker holding the job
// writes it, keyed by the job's lease, and the client that asked reads it
// in order, whether it starts before, during or after the writing
// (docs/tokens.md).
func ExampleClient_ReadTokens() {
	url, stop := startBroker()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Connect(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.AddQueue(ctx, semaq.QueueConfig{Name: "INFER", Subjects: []string{"ai.infer.>"}}); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Publish(ctx, "ai.infer.llama3", []byte(`{"prompt":"hi"}`), client.WithMsgID("req-1")); err != nil {
		log.Fatal(err)
	}

	// The worker: its answer is the token stream of the request's id.
	jobs, err := c.Fetch(ctx, "INFER", client.FetchWait(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	for _, job := range jobs {
		w, err := job.OpenTokenStream(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for _, tok := range []string{"Hello", ",", " world"} {
			if err := w.Write(ctx, tok); err != nil {
				log.Fatal(err)
			}
		}
		if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "stop"}); err != nil {
			log.Fatal(err)
		}
		if err := job.Ack(ctx); err != nil {
			log.Fatal(err)
		}
	}

	// The client that asked.
	r, err := c.ReadTokens(ctx, "req-1")
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	for {
		chunk, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		if chunk.Final != nil {
			fmt.Printf("\n[%s]\n", chunk.Final.FinishReason)
			continue
		}
		fmt.Print(chunk.Text)
	}
	// Output:
	// Hello, world
	// [stop]
}

// Schema-on-write: a stream bound to a registry subject refuses the
// payloads that do not match its schema, and stores nothing of them
// (docs/schema-registry.md).
func ExampleClient_RegisterSchema() {
	url, stop := startBroker()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Connect(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	id, version, err := c.RegisterSchema(ctx, "inference-request", `{
		"type": "object",
		"required": ["model", "messages"],
		"properties": {"model": {"type": "string"}, "messages": {"type": "array"}}
	}`)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("registered inference-request version %d: schema id %d\n", version, id)
	// Schema binds every subject of the stream (BindSchema binds any pattern).
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "CHAT", Subjects: []string{"chat.>"}, Schema: "inference-request"}); err != nil {
		log.Fatal(err)
	}

	if _, err := c.Publish(ctx, "chat.req", []byte(`{"model":"llama3","messages":[]}`)); err != nil {
		log.Fatal(err)
	}
	_, err = c.Publish(ctx, "chat.req", []byte(`{"prompt":"hi"}`))
	if errors.Is(err, semaq.ErrSchema) {
		fmt.Println("refused:", err)
	}
	info, err := c.StreamInfo(ctx, "CHAT")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("messages stored:", info.State.Messages)
	// Output:
	// registered inference-request version 1: schema id 1
	// refused: payload on chat.req does not match schema id 1 (registry subject inference-request): payload invalid at /: missing properties "messages", "model" (required)
	// messages stored: 1
}

// startBroker runs a broker for an example: NATS on a free loopback port,
// no HTTP, data in a temporary directory. stop shuts it down and removes
// the directory.
func startBroker() (url string, stop func()) {
	dir, err := os.MkdirTemp("", "semaq-example-")
	if err != nil {
		log.Fatal(err)
	}
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP = dir, "127.0.0.1:0", ""
	s, err := broker.New(cfg, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	return s.ClientURL(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		_ = os.RemoveAll(dir)
	}
}

// Consume → transform → produce, exactly once: each order becomes its
// invoice lines, committed as one atomic batch before the order is acked.
// A processor started again after a crash, or past the duplicate window,
// writes no line twice (docs/exactly-once.md).
func ExampleClient_ProcessExactlyOnce() {
	url, stop := startBroker()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c, err := client.Connect(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for name, subj := range map[string]string{"ORDERS": "orders.>", "INVOICES": "invoices.>"} {
		if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: name, Subjects: []string{subj}}); err != nil {
			log.Fatal(err)
		}
	}
	for _, order := range []string{"book", "pen,ink", ""} {
		if _, err := c.Publish(ctx, "orders.eu", []byte(order)); err != nil {
			log.Fatal(err)
		}
	}

	// One invoice line per item; an empty order makes none.
	invoice := func(m *client.Msg) ([]client.Out, error) {
		var lines []client.Out
		for item := range strings.SplitSeq(string(m.Data), ",") {
			if item != "" {
				lines = append(lines, client.Out{Subject: "invoices.eu", Data: []byte("line: " + item)})
			}
		}
		return lines, nil
	}
	pctx, stopProcessor := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.ProcessExactlyOnce(pctx, "orders.>", "invoicer", invoice, client.OutputSubjects("invoices.>"))
	}()

	sub, err := c.Subscribe(ctx, "invoices.>", client.WithMaxMessages(3))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for range 3 {
		m, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (%s)\n", m.Data, m.Header.Get(semaq.HdrMsgID))
	}
	stopProcessor()
	fmt.Println("processor:", <-done)
	// Output:
	// line: book (ORDERS:1:0)
	// line: pen (ORDERS:2:0)
	// line: ink (ORDERS:2:1)
	// processor: context canceled
}
