package broker_test

import (
	"testing"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/plugin/plugintest"
)

// The slow tests of this package (its clusters above all) wait far more than
// they compute: they run four at a time (brokertest.Main).
// Plugins are built once per test binary (plugintest), removed after.
func TestMain(m *testing.M) { brokertest.Main(m, 4, plugintest.Cleanup) }
