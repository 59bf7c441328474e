package broker

import "github.com/semaq/semaq/semaq"

// FilterTotals sums the counters of the filters s runs now.
func FilterTotals(s *Server) semaq.FilterStats {
	if s.filters == nil {
		return semaq.FilterStats{}
	}
	return s.filters.Totals()
}

// FilterCount is the number of filters s runs now.
func FilterCount(s *Server) int {
	if s.filters == nil {
		return 0
	}
	return s.filters.Running()
}
