package expr

import (
	"strings"
	"testing"
)

func TestPayloadFields(t *testing.T) {
	env := testEnv(t)
	for _, tc := range []struct {
		src  string
		want string // FieldRef strings, "?" after presence tests, space-separated
	}{
		{`payload.confidance > 0.8`, "payload.confidance"},
		{`payload.a.b == 1 && payload.a.c == 2 && payload.a == {}`, "payload.a.b payload.a.c"},
		{`payload["user"].name == "x"`, "payload.user.name"},
		{`has(payload.user.id)`, "payload.user.id?"},
		{`payload.?score.orValue(0.0) > 0.5`, "payload.score?"},
		{`has(payload.x) && payload.x > 1`, "payload.x"},
		{`payload.messages[0].role == "user"`, "payload.messages"},
		{`payload.items.exists(i, i.ok)`, "payload.items"},
		{`payload[subject] == 1`, ""},
		{`model == "m" && headers["x"] == "y"`, ""},
	} {
		t.Run(tc.src, func(t *testing.T) {
			p, err := env.Compile(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range p.PayloadFields() {
				s := r.String()
				if r.Presence {
					s += "?"
				}
				got = append(got, s)
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("PayloadFields = %q, want %q", strings.Join(got, " "), tc.want)
			}
		})
	}
}
