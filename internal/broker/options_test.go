package broker_test

import (
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/broker"
)

func TestWithOperatorRefusesAKeyThatIsNotAUserKey(t *testing.T) {
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP = t.TempDir(), "127.0.0.1:0", ""
	for _, pub := range []string{"", "alice", "SUAM3BLZDGXEL5JXL5XEOBTD7FBL2EHXV2IBIX2C4HVU6UQ7U5ABPMNGCE"} {
		if _, err := broker.New(cfg, nil, broker.WithOperator(pub)); err == nil || !strings.Contains(err.Error(), "operator") {
			t.Errorf("WithOperator(%q): err = %v", pub, err)
		}
	}
}
