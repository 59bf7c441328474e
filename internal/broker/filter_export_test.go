package broker

import "github.com/semaq/semaq/semaq"

// FilterTotals sums the counters of the filters s runs now.
func FilterTotals(s *Server) semaq.FilterStats {
	var t semaq.FilterStats
	if s.filters == nil {
		return t
	}
	s.filters.mu.Lock()
	defer s.filters.mu.Unlock()
	for _, p := range s.filters.pumps {
		st := p.stats()
		t.Matched += st.Matched
		t.Skipped += st.Skipped
		t.Errors += st.Errors
		t.MissingField += st.MissingField
	}
	return t
}

// FilterCount is the number of filters s runs now.
func FilterCount(s *Server) int {
	if s.filters == nil {
		return 0
	}
	s.filters.mu.Lock()
	defer s.filters.mu.Unlock()
	return len(s.filters.pumps)
}
