package pii

// edit is one string value RewriteStrings replaces.
type edit struct {
	str  jsonString
	text string
}

// RewriteStrings applies f to the string values of a JSON payload (an
// object or array) at the selected paths (Config.Paths' syntax; none
// selects every string), or to the whole payload when it is not JSON, and
// returns the payload with the values f changed, re-encoded, and nothing
// else changed. It returns payload itself when f changed nothing. An error
// of f ends it; a bad path or JSON nested past MaxDepth is an error too.
func RewriteStrings(payload []byte, paths []string, f func(string) (string, error)) ([]byte, bool, error) {
	var ps []path
	for _, p := range paths {
		cp, err := compilePath(p)
		if err != nil {
			return payload, false, err
		}
		ps = append(ps, cp)
	}
	if looksJSON(payload) {
		w := walker{data: payload, paths: ps, visit: visitor{collect: true, each: f}}
		switch err := w.walk(); {
		case err == errSyntax:
		case err != nil:
			return payload, false, err
		case len(w.visit.edits) == 0:
			return payload, false, nil
		default:
			out := make([]byte, 0, len(payload)+len(payload)/8)
			prev := 0
			for _, e := range w.visit.edits {
				out = append(out, payload[prev:e.str.start]...)
				out = appendEncoded(out, e.text)
				prev = e.str.end
			}
			return append(out, payload[prev:]...), true, nil
		}
	}
	s := string(payload)
	out, err := f(s)
	if err != nil || out == s {
		return payload, false, err
	}
	return []byte(out), true, nil
}

// rewrite runs the visitor's function on one selected string.
func (v *visitor) rewrite(s jsonString, raw []byte) error {
	text := string(raw)
	if s.esc {
		text = decodeString(nil, raw)
	}
	out, err := v.each(text)
	if err != nil {
		return err
	}
	if out != text {
		v.edits = append(v.edits, edit{str: s, text: out})
	}
	return nil
}
