package broker_test

import (
	"testing"

	"github.com/semaq/semaq/internal/brokertest"
)

// The slow tests of this package (its clusters above all) wait far more than
// they compute: they run four at a time (brokertest.Main).
func TestMain(m *testing.M) { brokertest.Main(m, 4) }
