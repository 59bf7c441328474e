package classcmd_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/cli"
)

func run(url string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := cli.Main(append(args, "--server", url), strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// semaq queue class add, ls, rm against a broker; the queue status shows
// a queue's class; bad flags are refused naming them.
func TestClassCommands(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	url := s.ClientURL()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"queue", "class", "ls"}, 0, "No classes."},
		{[]string{"queue", "class", "add", "hbm2-inference", "--require", "hardware.gpu.memory=hbm2", "--prefer", "gpu=a100", "--max-concurrency", "8"}, 0,
			"Class hbm2-inference added (require hardware.gpu.memory=hbm2, prefer gpu=a100, max concurrency 8)"},
		{[]string{"queue", "class", "add", "hbm2-inference"}, 1, "already exists"},
		{[]string{"queue", "class", "add", "hbm2-inference", "--max-concurrency", "2", "--replace"}, 0, "max concurrency 2"},
		{[]string{"queue", "class", "add", "x", "--require", "gpu"}, 1, `--require: label "gpu" is not key=value`},
		{[]string{"queue", "class", "add", "x", "--max-concurrency", "-1"}, 1, "max concurrency -1 is not from 0"},
		{[]string{"queue", "class", "add", "a.b"}, 1, "class name"},
		{[]string{"queue", "class", "ls"}, 0, "hbm2-inference  -        -       0     2"},
		{[]string{"queue", "add", "INFER", "--subjects", "ai.infer.>", "--class", "nope"}, 1, "class nope is not defined"},
		{[]string{"queue", "add", "INFER", "--subjects", "ai.infer.>", "--class", "hbm2-inference"}, 0, "Queue INFER added"},
		{[]string{"queue", "status", "INFER"}, 0, "hbm2-inference  0 queued  0 held here  0 held in the cluster, max 2"},
		{[]string{"queue", "class", "rm", "hbm2-inference"}, 0, "Class hbm2-inference removed"},
		{[]string{"queue", "class", "rm", "hbm2-inference"}, 1, "class hbm2-inference not found"},
		{[]string{"worker", "--upstream", "sim", "--model", "m", "--labels", "gpu"}, 1, `invalid argument "gpu" for "--labels" flag: label "gpu" is not key=value`},
	} {
		code, stdout, stderr := run(url, c.args...)
		if code != c.code || !strings.Contains(stdout+stderr, c.want) {
			t.Errorf("semaq %s: exit %d, stdout %q, stderr %q; want exit %d with %q", strings.Join(c.args, " "), code, stdout, stderr, c.code, c.want)
		}
	}
}
