package batchjson

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/semaq/semaq/semaq"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want semaq.BatchMsg
		err  string // "" accepts
	}{
		{`{"subject":"ai.x"}`, semaq.BatchMsg{Subject: "ai.x"}, ""},
		{`{"subject":"ai.x","data":{ "b": [1, 2],
			"a":"x" }}`, semaq.BatchMsg{Subject: "ai.x", Data: []byte(`{"b":[1,2],"a":"x"}`)}, ""},
		{`{"subject":"ai.x","data":"text"}`, semaq.BatchMsg{Subject: "ai.x", Data: []byte(`"text"`)}, ""},
		{`{"subject":"ai.x","data":null}`, semaq.BatchMsg{Subject: "ai.x", Data: []byte(`null`)}, ""},
		{`{"subject":"ai.x","data_base64":"AAH/"}`, semaq.BatchMsg{Subject: "ai.x", Data: []byte{0, 1, 255}}, ""},
		{`{"subject":"ai.x","headers":{"AI-Model":"m","X-Tag":["a","b"]}}`,
			semaq.BatchMsg{Subject: "ai.x", Header: map[string][]string{"AI-Model": {"m"}, "X-Tag": {"a", "b"}}}, ""},
		{`{"subject":"ai.x","data":1,"data_base64":"AA=="}`, semaq.BatchMsg{}, `both "data" and "data_base64"`},
		{`{"subject":"ai.x","data_base64":"%%"}`, semaq.BatchMsg{}, "not standard base64"},
		{`{"subject":"ai.x","data_base64":7}`, semaq.BatchMsg{}, "not a JSON string"},
		{`{"subject":"ai.x","data_base64":null}`, semaq.BatchMsg{}, "not a JSON string"},
		{`{"subject":"ai.x","headers":{"X":1}}`, semaq.BatchMsg{}, `header "X": want a string`},
		{`{"subject":"ai.x","headers":{"X":[]}}`, semaq.BatchMsg{}, `header "X": an empty array`},
		{`{"subject":"ai.x","headers":{"X":["a",2]}}`, semaq.BatchMsg{}, `header "X": want a string`},
		{`{"data":1}`, semaq.BatchMsg{}, `no "subject"`},
		{`{"subject":"ai.x","Subject":"ai.y"}`, semaq.BatchMsg{}, "differ only in case"},
		{`{"subject":"ai.x","payload":1}`, semaq.BatchMsg{}, `unknown key "payload"`},
		{`{"subject":"ai.x","headers":{"X":"a","X":"b"}}`, semaq.BatchMsg{}, `key "X" appears twice`},
		{`{"subject":"ai.x","subject":"ai.y"}`, semaq.BatchMsg{}, `key "subject" appears twice`},
		{`{"subject":"ai.x","data":1 2}`, semaq.BatchMsg{}, `"data": not valid JSON`},
		{`{"subject":"ai.x","data":"a\"}","headers":{}}`, semaq.BatchMsg{Subject: "ai.x", Data: []byte(`"a\"}"`)}, ""},
		{`{"subject":"a\u0069.x"}`, semaq.BatchMsg{Subject: "ai.x"}, ""},
		{"{\"subject\":\"ai\nx\"}", semaq.BatchMsg{}, "not valid JSON"},
		{`{"subject":"ai.x",}`, semaq.BatchMsg{}, "want a string"},
		{`{"subject":"ai.x"} {}`, semaq.BatchMsg{}, "data after the JSON value"},
		{`{"subject":"ai.x"`, semaq.BatchMsg{}, "not valid JSON"},
		{`["ai.x"]`, semaq.BatchMsg{}, "want a JSON object"},
		{`null`, semaq.BatchMsg{}, "want a JSON object"},
		{"{\"subject\":\"ai.\xff\"}", semaq.BatchMsg{}, "UTF-8"},
	} {
		got, err := Parse([]byte(tc.in))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one containing %q", tc.in, err, tc.err)
		case tc.err == "" && !reflect.DeepEqual(got, tc.want):
			t.Errorf("%s: %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestReadLinesNamesTheLine(t *testing.T) {
	t.Parallel()
	in := "{\"subject\":\"a\"}\r\n\n  \n{\"subject\":\"b\",\"data\":2}\n{\"subject\":\"c\",\"data\":}\n{\"subject\":\"d\"}\n"
	var got []string
	err := ReadLines(strings.NewReader(in), 1<<10, func(line, index int, m semaq.BatchMsg) error {
		got = append(got, m.Subject)
		return nil
	})
	var le *LineError
	if !errors.As(err, &le) || le.Line != 5 || le.Index != 2 || !strings.HasPrefix(err.Error(), "line 5 (message 2): ") {
		t.Fatalf("error %v, want line 5 (message 2)", err)
	}
	if strings.Join(got, ",") != "a,b" {
		t.Fatalf("read %v before the bad line, want a,b", got)
	}
	long := "{\"subject\":\"a\"}\n{\"subject\":\"" + strings.Repeat("x", 2000) + "\"}\n"
	err = ReadLines(strings.NewReader(long), 1<<10, func(int, int, semaq.BatchMsg) error { return nil })
	if !errors.As(err, &le) || le.Line != 2 || !strings.Contains(err.Error(), "longer than 1024 bytes") {
		t.Fatalf("a long line: %v, want line 2 named as too long", err)
	}
}

func TestParseArray(t *testing.T) {
	t.Parallel()
	msgs, err := ParseArray([]byte(` [ {"subject":"a"},
		{"subject":"b","data":[1, 2]} ] `), 2)
	if err != nil || len(msgs) != 2 || msgs[1].Subject != "b" || string(msgs[1].Data) != "[1,2]" {
		t.Fatalf("%+v, %v", msgs, err)
	}
	for _, tc := range []struct{ in, err string }{
		{`{"subject":"a"}`, "want a JSON array"},
		{`[{"subject":"a"},{"subject":1}]`, "message 1: "},
		{`[{"subject":"a"} {"subject":"b"}]`, "message 1: not valid JSON"},
		{`[{"subject":"a"}`, "not closed"},
		{`[{"subject":"a"}] x`, "data after the array"},
		{`[{"subject":"a"},{"subject":"b"},{"subject":"c"}]`, "too many"},
	} {
		if _, err := ParseArray([]byte(tc.in), 2); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want an error containing %q", tc.in, err, tc.err)
		}
	}
}
