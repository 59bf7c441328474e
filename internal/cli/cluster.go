package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

func newClusterCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Inspect the cluster of SemaQ nodes (status), make its secret (secret)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newClusterStatusCmd(e), newClusterSecretCmd(e))
	return cmd
}

func newClusterSecretCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "secret",
		Short: "Print a new cluster secret: 256 random bits, hex",
		Long: `Print a new secret for --cluster-secret-file (config key cluster_secret_file).
Every node of a cluster reads the same file; a route proves it holds the
secret, so a client certificate alone cannot join the cluster as a node
(docs/cluster.md, Security). Write it once, readable by its owner only, and
copy the file to every node.`,
		Example: "  (umask 077; semaq cluster secret > cluster.secret)\n  semaq serve --cluster-secret-file cluster.secret ...",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := make([]byte, 32)
			if _, err := rand.Read(b); err != nil {
				return fmt.Errorf("cluster secret: %w", err)
			}
			_, err := fmt.Fprintln(e.stdout, hex.EncodeToString(b))
			return err
		},
	}
}

func newClusterStatusCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Nodes, versions, JetStream's meta leader, each stream's leader and replicas, and who dispatches each queue",
		Long: `Describe the cluster the broker belongs to (docs/cluster.md). The node that
answers asks every node for a report and waits up to two seconds; a node that
did not answer is shown as not connected. Replica lag is counted in Raft
operations, as each stream's leader sees it. A node that is not clustered
describes itself alone.`,
		Example: "  semaq cluster status\n  semaq cluster status --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				st, err := c.ClusterStatus(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, st)
				}
				return writeClusterStatus(e.stdout, st)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the cluster status as JSON")
	e.addServerFlag(cmd)
	return cmd
}

func writeClusterStatus(w io.Writer, st *semaq.ClusterStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if st.Name == "" {
		fmt.Fprintf(tw, "Node %s is not clustered.\n", st.AnsweredBy)
	} else {
		fmt.Fprintf(tw, "Cluster %s (answered by %s)\n", st.Name, st.AnsweredBy)
		fmt.Fprintf(tw, "  Meta leader:\t%s\n", orDefault(st.MetaLeader, "none (electing)"))
	}
	// What SemaQ's own streams have, which a shrunk cluster keeps, beside
	// what a new one would be made with now.
	own := 0
	for _, s := range st.Streams {
		if s.Own {
			own = max(own, s.Replicas)
		}
	}
	switch {
	case own == 0 || own == st.Replicas:
		fmt.Fprintf(tw, "  SemaQ's own streams:\tR%d\n", max(own, st.Replicas))
	default:
		fmt.Fprintf(tw, "  SemaQ's own streams:\tR%d (one made now would be R%d: this node reaches %d nodes)\n", own, st.Replicas, reached(st))
	}
	for _, d := range degraded(st) {
		fmt.Fprintf(tw, "  DEGRADED:\t%s\n", d)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NODE\tCONNECTED\tVERSION\tNATS\tSYNC\tJETSTREAM\tROUTES\tDISPATCHES")
	for _, n := range st.Nodes {
		js := "-"
		switch {
		case n.Meta != nil && n.Meta.Offline:
			js = "offline"
		case n.Meta != nil && !n.Meta.Current:
			js = fmt.Sprintf("behind by %d", n.Meta.Lag)
		case n.Connected && n.JetStreamCurrent:
			js = "current"
		case n.Connected:
			js = "not current"
		}
		routes := make([]string, 0, len(n.Routes))
		for _, r := range n.Routes {
			routes = append(routes, r.Node)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, yesNo(n.Connected), orDefault(n.Version, "-"),
			orDefault(n.NATSVersion, "-"), orDefault(n.Sync, "-"), js, orDefault(strings.Join(routes, ","), "-"), orDefault(strings.Join(n.Dispatching, ","), "-"))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "STREAM\tREPLICAS\tLEADER\tFOLLOWERS")
	for _, s := range st.Streams {
		name := s.Stream
		if s.Own {
			name += " (semaq)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", name, s.Replicas, orDefault(s.Leader, "-"), orDefault(followers(s.Followers), "-"))
	}
	if st.StreamsTruncated {
		fmt.Fprintf(tw, "(the first %d streams only)\n", semaq.MaxClusterStreams)
	}
	if len(st.Queues) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "QUEUE\tDISPATCHED BY\tSTREAM LEADER")
		for _, q := range st.Queues {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", q.Queue, orDefault(q.Node, "unknown (no node that answered runs it)"), orDefault(q.StreamLeader, "-"))
		}
	}
	for _, w := range st.Warnings {
		fmt.Fprintf(tw, "\nWARNING: %s\n", w)
	}
	return tw.Flush()
}

// followers describes a stream's other replicas: name, then current, its
// lag, or offline.
func followers(ps []semaq.PeerStatus) string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		state := "current"
		switch {
		case p.Offline:
			state = "offline"
		case !p.Current:
			state = fmt.Sprintf("lag %d", p.Lag)
		}
		out = append(out, fmt.Sprintf("%s (%s)", p.Name, state))
	}
	return strings.Join(out, ", ")
}

// reached counts the nodes of st connected to the one that answered.
func reached(st *semaq.ClusterStatus) int {
	n := 0
	for _, node := range st.Nodes {
		if node.Connected {
			n++
		}
	}
	return n
}

// degraded says what runs short: nodes not connected, streams without a
// leader or with replicas offline (each stream keeps serving while a
// quorum of its replicas is up).
func degraded(st *semaq.ClusterStatus) []string {
	var out []string
	for _, n := range st.Nodes {
		if !n.Connected {
			out = append(out, fmt.Sprintf("node %s is not connected", n.Name))
		}
	}
	for _, s := range st.Streams {
		var off []string
		for _, p := range s.Followers {
			if p.Offline {
				off = append(off, p.Name)
			}
		}
		switch {
		case s.Replicas > 1 && s.Leader == "":
			out = append(out, fmt.Sprintf("stream %s has no leader (electing, or too few replicas up)", s.Stream))
		case len(off) > 0:
			out = append(out, fmt.Sprintf("stream %s: %d of %d replicas up (%s offline)", s.Stream, s.Replicas-len(off), s.Replicas, strings.Join(off, ", ")))
		}
	}
	return out
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
