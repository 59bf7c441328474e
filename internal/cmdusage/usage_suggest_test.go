package cmdusage

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestUnknownFlagSuggestsTheNearest(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--modle", "x"}, "unknown flag: --modle (did you mean --model?)"},
		{[]string{"run", "--timout=3s"}, "unknown flag: --timout (did you mean --timeout?)"},
		{[]string{"run", "--zzzzzz"}, "unknown flag: --zzzzzz"},
	} {
		root := &cobra.Command{Use: "semaq", SilenceErrors: true, SilenceUsage: true}
		run := &cobra.Command{Use: "run", RunE: func(*cobra.Command, []string) error { return nil }}
		run.Flags().String("model", "", "")
		run.Flags().Duration("timeout", 0, "")
		root.AddCommand(run)
		Explain(root)
		root.SetArgs(tc.args)
		err := root.Execute()
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
		if strings.Contains(tc.want, "zzzz") && strings.Contains(err.Error(), "did you mean") {
			t.Errorf("%v: suggested a flag far from it: %v", tc.args, err)
		}
	}
}
