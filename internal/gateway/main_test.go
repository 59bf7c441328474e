package gateway_test

import (
	"testing"

	"github.com/semaq/semaq/internal/brokertest"
)

// The cluster and worker-loss tests mostly wait for brokers and leases: they
// run four at a time (brokertest.Main).
func TestMain(m *testing.M) { brokertest.Main(m, 4) }
