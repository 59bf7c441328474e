package hostile

import (
	"testing"

	"github.com/semaq/semaq/internal/brokertest"
)

// The browser and the cross-tenant token test mostly wait: they run beside
// each other (brokertest.Main).
func TestMain(m *testing.M) { brokertest.Main(m, 4) }
