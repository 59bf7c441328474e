package streamfilter

// Delay measures what holding back costs a reader: it writes chunks to a
// new Stream of s, then flushes, and returns how many chunks each byte
// waited between arriving and being released, the most and the mean. A byte
// released by the Write of its own chunk waited 0; Flush counts as one more
// chunk. Bytes a Stop rule dropped are not counted. At a token rate, the
// figures turn into added time to first token and inter-token latency.
func Delay(s *Set, chunks []string) (maxChunks, meanChunks float64) {
	st := s.Stream()
	var (
		arrived []int // chunk index of each byte of the stream
		next    int64 // first byte not yet released
		sum     float64
		n       int
	)
	settle := func(at int) {
		for ; next < st.rel; next++ {
			w := float64(at - arrived[next])
			maxChunks = max(maxChunks, w)
			sum += w
			n++
		}
	}
	stopped := false
	for i, c := range chunks {
		for range len(c) {
			arrived = append(arrived, i)
		}
		_, _, stop, _ := st.Write(c)
		settle(i)
		if stop {
			stopped = true
			break
		}
	}
	if !stopped {
		st.Flush()
		settle(len(chunks))
	}
	if n > 0 {
		meanChunks = sum / float64(n)
	}
	return maxChunks, meanChunks
}
