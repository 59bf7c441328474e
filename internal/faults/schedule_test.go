package faults

import (
	"reflect"
	"testing"
)

func TestScheduleReplaysFromSeed(t *testing.T) {
	a, b := NewSchedule(42, 5), NewSchedule(42, 5)
	for range 200 {
		if x, y := a.Next(), b.Next(); !reflect.DeepEqual(x, y) {
			t.Fatalf("same seed, different steps: %v and %v", x, y)
		}
	}
	c := NewSchedule(43, 5)
	same := true
	a = NewSchedule(42, 5)
	for range 20 {
		same = same && reflect.DeepEqual(a.Next(), c.Next())
	}
	if same {
		t.Fatal("seeds 42 and 43 drew the same 20 steps")
	}
}

func TestScheduleKeepsFaultsToAMinority(t *testing.T) {
	for _, n := range []int{3, 5} {
		s := NewSchedule(7, n)
		minority := map[int]bool{}
		for _, i := range s.Minority() {
			minority[i] = true
		}
		if len(minority) != (n-1)/2 {
			t.Fatalf("%d nodes: corruptible minority %v", n, s.Minority())
		}
		kinds := map[Kind]int{}
		files := map[FileFault]int{}
		for range 500 {
			st := s.Next()
			kinds[st.Kind]++
			if len(st.Nodes) > (n-1)/2 {
				t.Fatalf("%d nodes: %v hits a majority", n, st)
			}
			if st.For <= 0 || st.Gap <= 0 {
				t.Fatalf("%v: no duration", st)
			}
			switch st.Kind {
			case File:
				files[st.File]++
				if !minority[st.Nodes[0]] {
					t.Fatalf("%v damages node %d, outside the minority %v", st, st.Nodes[0], s.Minority())
				}
			case Partition:
				if len(st.Groups) != 2 || len(st.Groups[0])+len(st.Groups[1]) != n || len(st.Groups[0]) == 0 || len(st.Groups[1]) == 0 {
					t.Fatalf("%v does not split %d nodes in two", st, n)
				}
			case Delay:
				if st.Latency <= 0 {
					t.Fatalf("%v: no latency", st)
				}
			}
		}
		for _, w := range weights {
			if kinds[w.kind] == 0 {
				t.Fatalf("%d nodes: 500 steps and no %s", n, w.kind)
			}
		}
		if len(files) != 4 {
			t.Fatalf("%d nodes: file faults drawn %v, want all four", n, files)
		}
	}
}
