package broker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// routeHealthEverywhere is route's health through each running node.
func routeHealthEverywhere(ctx context.Context, c *brokertest.Cluster, route string) ([][]semaq.RouteTargetHealth, error) {
	var out [][]semaq.RouteTargetHealth
	for _, s := range c.Nodes() {
		cl, err := client.Connect(ctx, s.ClientURL())
		if err != nil {
			return nil, err
		}
		routes, err := cl.Routes(ctx)
		cl.Close()
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(routes, func(r semaq.RouteInfo) bool { return r.Name == route })
		if i < 0 || len(routes) != 1 {
			// The stored weights are no rule of their own.
			return nil, fmt.Errorf("%s lists routes %+v, want %s alone", s.NATSServer().Name(), routes, route)
		}
		out = append(out, routes[i].Health)
	}
	return out, nil
}

// stickyPicks is where each node would route keys tenant-0..n-1.
func stickyPicks(ctx context.Context, c *brokertest.Cluster, n int) ([][]string, error) {
	var out [][]string
	for _, s := range c.Nodes() {
		cl, err := client.Connect(ctx, s.ClientURL())
		if err != nil {
			return nil, err
		}
		var picks []string
		for i := range n {
			res, err := cl.TestRoute(ctx, "ai.x", []byte(`{}`), client.WithTenant(fmt.Sprintf("tenant-%d", i)))
			if err != nil {
				cl.Close()
				return nil, err
			}
			picks = append(picks, res.Target)
		}
		cl.Close()
		out = append(out, picks)
	}
	return out, nil
}

// sameEverywhere is nil when every node reports the same health and makes
// the same sticky picks, checked twice around the picks so no update of
// the weights fell in between; it returns a's effective weight.
func sameEverywhere(ctx context.Context, c *brokertest.Cluster) (float64, error) {
	before, err := routeHealthEverywhere(ctx, c, "ab")
	if err != nil {
		return 0, err
	}
	picks, err := stickyPicks(ctx, c, 40)
	if err != nil {
		return 0, err
	}
	after, err := routeHealthEverywhere(ctx, c, "ab")
	if err != nil {
		return 0, err
	}
	for i := range before {
		if !slices.Equal(before[i], before[0]) || !slices.Equal(after[i], before[0]) {
			return 0, fmt.Errorf("the nodes report %+v, then %+v", before, after)
		}
		if !slices.Equal(picks[i], picks[0]) {
			return 0, fmt.Errorf("node %d picks %v, node 1 %v", i+1, picks[i], picks[0])
		}
	}
	return before[0][0].Effective, nil
}

// An adaptive split routes by the same weights on every node, though one
// node routes every message: a's consumer fails one message in three, and
// every node's weights follow that ratio, not what each node routed. When
// the node computing the weights stops, another goes on from them.
func TestClusterAdaptiveWeightsShared(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	admin := brokertest.Connect(t, c.Node(0))
	for _, st := range []semaq.StreamConfig{
		{Name: "AI", Subjects: []string{"ai.>"}, Replicas: 3},
		{Name: "GPUA", Subjects: []string{"gpu.a"}, Replicas: 3},
		{Name: "GPUB", Subjects: []string{"gpu.b"}, Replicas: 3},
	} {
		if _, err := admin.AddStream(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.AddRoute(ctx, semaq.Route{Name: "ab", Subject: "ai.x", Adaptive: true, StickyKey: "tenant",
		Split: []semaq.RouteSplit{{Subject: "gpu.a", Weight: 50}, {Subject: "gpu.b", Weight: 50}}}); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	consume := func(node int, subject string, failEvery int) {
		cl := failoverClient(t, c, node)
		var sub *client.Subscription
		c.Eventually(30*time.Second, "a consumer of "+subject, func() error {
			var err error
			sub, err = cl.Subscribe(ctx, subject)
			return err
		})
		wg.Go(func() {
			defer sub.Close()
			for n := 1; ; n++ {
				m, err := sub.Next(runCtx)
				if err != nil {
					if runCtx.Err() != nil {
						return
					}
					continue // reconnecting
				}
				if failEvery > 0 && n%failEvery == 0 {
					_ = m.Term("model crashed")
				} else {
					_ = m.Ack(runCtx)
				}
			}
		})
	}
	consume(1, "gpu.a", 3)
	consume(2, "gpu.b", 0)
	// Only n1's ingress routes, at first.
	pub := failoverClient(t, c, 0)
	wg.Go(func() {
		for i := 0; runCtx.Err() == nil; i++ {
			pctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
			_, _ = pub.Publish(pctx, "ai.x", []byte(`{}`), client.WithTenant(fmt.Sprintf("t%d", i%100)))
			cancel()
		}
	})

	var settled float64
	c.Eventually(60*time.Second, "every node to route by the same weights, a's lowered by its failures", func() error {
		a, err := sameEverywhere(ctx, c)
		if err != nil {
			return err
		}
		if a > 45 || a < 5 {
			return fmt.Errorf("a's effective weight is %g, want it lowered to about two thirds of 50", a)
		}
		settled = a
		return nil
	})

	// The node computing the weights stops; a survivor goes on from them.
	writer := c.StreamLeader("KV_" + reserved.RouteBucket)
	if writer < 0 {
		t.Fatal("no node leads the route bucket")
	}
	c.Stop(writer)
	c.Eventually(60*time.Second, "the survivors to route by the same weights", func() error {
		a, err := sameEverywhere(ctx, c)
		if err != nil {
			return err
		}
		if a > 45 || a < 5 {
			return fmt.Errorf("a's effective weight is %g (it was %g before the node stopped)", a, settled)
		}
		return nil
	})
}
