package semaq

import (
	"bytes"
	"errors"
	"testing"
)

func TestJobFrameRoundTrip(t *testing.T) {
	b := AppendJobFrameHeader(nil)
	b = AppendFrameJob(b, "$SQ.QA.Q.1.x", map[string][]string{"AI-Tenant": {"acme"}, "X-Multi": {"a", "b"}},
		[]string{HdrQueueSeq, "1"}, []byte("payload one"))
	b = AppendFrameJob(b, "$SQ.QA.Q.2.y", nil, nil, nil)
	jobs, err := ParseJobFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].Reply != "$SQ.QA.Q.1.x" || string(jobs[0].Data) != "payload one" ||
		jobs[0].Header["AI-Tenant"][0] != "acme" || len(jobs[0].Header["X-Multi"]) != 2 || jobs[0].Header[HdrQueueSeq][0] != "1" {
		t.Fatalf("decoded %+v", jobs)
	}
	if jobs[1].Reply != "$SQ.QA.Q.2.y" || len(jobs[1].Data) != 0 || len(jobs[1].Header) != 0 {
		t.Fatalf("second job %+v", jobs[1])
	}
	// The broker's headers come first, so a forged stored header loses.
	b = AppendFrameJob(AppendJobFrameHeader(nil), "r", map[string][]string{HdrQueueSeq: {"999"}}, []string{HdrQueueSeq, "7"}, nil)
	jobs, _ = ParseJobFrame(b)
	if jobs[0].Header[HdrQueueSeq][0] != "7" {
		t.Fatalf("first %s = %q, want the broker's", HdrQueueSeq, jobs[0].Header[HdrQueueSeq][0])
	}
	for _, bad := range [][]byte{nil, []byte("SQJ0"), append(AppendJobFrameHeader(nil), 0x05, 'a'), append(AppendJobFrameHeader(nil), 0x00, 0xff, 0xff, 0xff, 0xff, 0x0f)} {
		if _, err := ParseJobFrame(bad); !errors.Is(err, ErrBadFrame) {
			t.Errorf("ParseJobFrame(%q) = %v, want ErrBadFrame", bad, err)
		}
	}
}

func TestJobFrameStringsOwnTheirBytes(t *testing.T) {
	b := AppendFrameJob(AppendJobFrameHeader(nil), "$SQ.QA.Q.1.x", map[string][]string{"X-Multi": {"a", "b"}, "K": {"v"}},
		[]string{HdrQueueSeq, "1"}, []byte("data"))
	b = AppendFrameJob(b, "$SQ.QA.Q.2.y", map[string][]string{"K": {"w"}}, nil, []byte("more"))
	jobs, err := ParseJobFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b[len(JobFrameMagic):] {
		b[len(JobFrameMagic)+i] = 'Z' // a caller reusing its buffer
	}
	if jobs[0].Reply != "$SQ.QA.Q.1.x" || jobs[1].Reply != "$SQ.QA.Q.2.y" || jobs[0].Header[HdrQueueSeq][0] != "1" ||
		jobs[0].Header["K"][0] != "v" || jobs[1].Header["K"][0] != "w" ||
		len(jobs[0].Header["X-Multi"]) != 2 || jobs[0].Header["X-Multi"][0]+jobs[0].Header["X-Multi"][1] != "ab" {
		t.Fatalf("reply or headers changed with the frame's buffer: %+v", jobs)
	}
	// A value appended to one name does not show in another's.
	jobs[0].Header["K"] = append(jobs[0].Header["K"], "x")
	if jobs[0].Header[HdrQueueSeq][0] != "1" || len(jobs[0].Header["X-Multi"]) != 2 {
		t.Fatalf("append to one header changed another: %+v", jobs[0].Header)
	}
}

func FuzzJobFrame(f *testing.F) {
	f.Add(AppendFrameJob(AppendJobFrameHeader(nil), "$SQ.QA.Q.1.x", map[string][]string{"K": {"v"}}, []string{"A", "b"}, []byte("d")))
	f.Add([]byte("SQJ1"))
	f.Add([]byte("SQJ1\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		jobs, err := ParseJobFrame(b)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v is not ErrBadFrame", err)
			}
			return
		}
		// Whatever decodes re-encodes to something that decodes the same.
		out := AppendJobFrameHeader(nil)
		for _, j := range jobs {
			out = AppendFrameJob(out, j.Reply, j.Header, nil, j.Data)
		}
		again, err := ParseJobFrame(out)
		if err != nil || len(again) != len(jobs) {
			t.Fatalf("re-encoded frame: %v, %d jobs of %d", err, len(again), len(jobs))
		}
		for i := range jobs {
			if again[i].Reply != jobs[i].Reply || !bytes.Equal(again[i].Data, jobs[i].Data) {
				t.Fatalf("job %d changed in a round trip", i)
			}
		}
	})
}
