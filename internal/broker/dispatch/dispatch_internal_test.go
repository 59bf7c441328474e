package dispatch

import (
	"testing"
	"time"

	"github.com/semaq/semaq/semaq"
)

func FuzzFetchRequest(f *testing.F) {
	for _, s := range []string{
		`{"worker":"w1","max":4,"max_tokens":4096,"wait":1000000000,"labels":{"model":"llama3","adapter":"a,b"}}`,
		`{"worker":"w"}`, `{}`, `{"worker":"x y"}`, `{"worker":"w","max":-1}`, `{"worker":"w","wait":-5}`,
		`{"worker":"w","max":99999}`, `{"worker":"w"} trailing`, `null`, `[]`, `{"worker":"w","labels":{"":"v"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := parseFetch(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		// Whatever parses is within the documented bounds.
		if req.Max < 1 || req.Max > semaq.MaxFetchBatch || req.MaxTokens < 0 || req.Wait < 0 || req.Wait > semaq.MaxFetchWait {
			t.Fatalf("accepted out-of-bounds request %+v", req)
		}
		if semaq.CheckConsumerName(req.Worker) != nil {
			t.Fatalf("accepted bad worker %q", req.Worker)
		}
	})
}

func TestAdaptiveThreshold(t *testing.T) {
	s := newScheduler(semaq.QueueConfig{Name: "Q"}.WithDefaults(), nil)
	var st queueStats
	if thr := st.adaptiveThreshold(10*time.Second, s); thr != 0 {
		t.Fatalf("no service seen: threshold %d, want 0 (off)", thr)
	}
	st.tokenRate = 1000
	calm := st.adaptiveThreshold(10*time.Second, s)
	if calm != 10000 {
		t.Fatalf("steady service: threshold %d, want rate × wait = 10000", calm)
	}
	// Varied prompts and service times tighten it.
	st.promptCV, st.svcSeen, st.svcMean, st.svcVar = 1.5, true, 1, 1
	if thr := st.adaptiveThreshold(10*time.Second, s); thr >= calm || thr != 4000 {
		t.Fatalf("with CVs 1.5 × 1: threshold %d, want 10000/(1+1.5) = 4000", thr)
	}
	if thr := st.adaptiveThreshold(0, s); thr != 0 {
		t.Fatalf("max wait unset: threshold %d", thr)
	}
}
