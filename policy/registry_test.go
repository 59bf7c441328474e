package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/semaq/semaq/policy"
	"github.com/semaq/semaq/semaq"
)

type passStep struct{}

func (passStep) Name() string { return "made" }
func (passStep) Apply(context.Context, *policy.Message) (policy.Verdict, error) {
	return policy.Pass, nil
}

func pass(json.RawMessage) (policy.Step, error) { return passStep{}, nil }

func TestRegistry(t *testing.T) {
	r := policy.NewRegistry()
	if err := r.Register(policy.Spec{Name: "mask", Summary: "masks"}, pass); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec policy.Spec
		f    policy.Factory
		want string
	}{
		{policy.Spec{Name: "mask"}, pass, "already registered"},
		{policy.Spec{Name: ""}, pass, "no name"},
		{policy.Spec{Name: "Mask"}, pass, "lower-case letters"},
		{policy.Spec{Name: "1mask"}, pass, "starting with a letter"},
		{policy.Spec{Name: "mask\nINFO forged"}, pass, "lower-case letters"},
		{policy.Spec{Name: strings.Repeat("m", 65)}, pass, "longer than 64 bytes"},
		{policy.Spec{Name: "nofactory"}, nil, "no factory"},
	} {
		if err := r.Register(tc.spec, tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register(%q): err = %v, want %q", tc.spec.Name, err, tc.want)
		}
	}
	// A clone registers apart from its original.
	c := r.Clone()
	if err := c.Register(policy.Spec{Name: "only-in-clone"}, pass); err != nil {
		t.Fatal(err)
	}
	if len(r.Specs()) != 1 || len(c.Specs()) != 2 || c.Specs()[0].Name != "mask" {
		t.Fatalf("specs: original %v, clone %v", r.Specs(), c.Specs())
	}
	// A step answers to the name it was enabled under.
	s, err := c.New("mask", nil)
	if err != nil || s.Name() != "mask" {
		t.Fatalf("New: %v, %v", s, err)
	}
	if _, err := r.New("only-in-clone", nil); err == nil || !strings.Contains(err.Error(), `"only-in-clone" is not registered; registered: mask`) {
		t.Fatalf("New of a kind the original lacks: %v", err)
	}
}

func TestFactoryErrorsNameTheStep(t *testing.T) {
	r := policy.NewRegistry()
	_ = r.Register(policy.Spec{Name: "picky"}, func(s json.RawMessage) (policy.Step, error) {
		return nil, errors.New("unknown setting colour")
	})
	_ = r.Register(policy.Spec{Name: "empty"}, func(json.RawMessage) (policy.Step, error) { return nil, nil })
	if _, err := r.New("picky", json.RawMessage(`{"colour":1}`)); err == nil || err.Error() != "policy step picky: unknown setting colour" {
		t.Errorf("picky: %v", err)
	}
	if _, err := r.New("empty", nil); err == nil || !strings.Contains(err.Error(), "made no step") {
		t.Errorf("empty: %v", err)
	}
}

func TestAsAPIError(t *testing.T) {
	e := policy.AsAPIError("pii", "ai.x", errors.New("holds an e-mail address"))
	if !errors.Is(e, semaq.ErrPolicy) || e.Error() != "policy pii refused the message on ai.x: holds an e-mail address" {
		t.Errorf("plain error: %v", e)
	}
	typed := semaq.NewAPIError(semaq.ErrForbidden, "not for you")
	if got := policy.AsAPIError("pii", "ai.x", typed); got != typed {
		t.Errorf("typed error: %v", got)
	}
	if got := policy.AsAPIError("pii", "ai.x", policy.Refuse("no %s", "cards")); !errors.Is(got, semaq.ErrPolicy) || got.Error() != "no cards" {
		t.Errorf("Refuse: %v", got)
	}
	if policy.DryRun(context.Background()) || !policy.DryRun(policy.WithDryRun(context.Background())) {
		t.Error("DryRun")
	}
}
