package metrics_test

import (
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/metrics"
)

// The store check's figures are exported once it ran, and not before.
func TestStoreCheckFamilies(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntime: true})
	if text := scrape(t, m); strings.Contains(text, "semaq_store_check") {
		t.Fatalf("store check figures before the check ran:\n%s", text)
	}
	m.StoreChecked(3, 1)
	text := scrape(t, m)
	for _, want := range []string{"semaq_store_check_damaged_total 3", "semaq_store_check_repaired_total 1"} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	Lint(t, text)
	var none *metrics.Metrics
	none.StoreChecked(1, 1) // components run without metrics
}
