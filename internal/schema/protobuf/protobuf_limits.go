package protofmt

import (
	"fmt"

	"github.com/semaq/semaq/internal/schema"
)

// protobufText charges one .proto text to the budget: its size, then one
// pass over its tokens counting them and the nesting of braces, brackets,
// parentheses and angle brackets. Comments and string literals are
// skipped. The pass is lexical only: protocompile reports malformed text.
func protobufText(b *schema.Budget, what, text string) error {
	if err := b.Text(what, len(text)); err != nil {
		return err
	}
	l := b.Limits()
	depth, line := 0, 1
	fail := func(limit string, max int, msg string) error {
		return fmt.Errorf("protobuf schema: %w", &schema.LimitError{Limit: limit, Max: max, Where: fmt.Sprintf("%s line %d", what, line), Message: msg})
	}
	token := func() error {
		if !b.Node() {
			return fail("MaxNodes", l.MaxNodes, fmt.Sprintf("more than %d tokens", l.MaxNodes))
		}
		return nil
	}
	word := false // inside an identifier or number
	for i := 0; i < len(text); i++ {
		c := text[i]
		isWord := c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
		if isWord {
			if !word {
				if err := token(); err != nil {
					return err
				}
			}
			word = true
			continue
		}
		word = false
		switch c {
		case '\n':
			line++
		case ' ', '\t', '\r', '\f', '\v':
		case '/':
			switch {
			case i+1 < len(text) && text[i+1] == '/':
				for i < len(text) && text[i] != '\n' {
					i++
				}
				i-- // let the newline count
			case i+1 < len(text) && text[i+1] == '*':
				i += 2
				for i+1 < len(text) && !(text[i] == '*' && text[i+1] == '/') {
					if text[i] == '\n' {
						line++
					}
					i++
				}
				i++
			default:
				if err := token(); err != nil {
					return err
				}
			}
		case '"', '\'':
			if err := token(); err != nil {
				return err
			}
			for i++; i < len(text) && text[i] != c && text[i] != '\n'; i++ {
				if text[i] == '\\' {
					i++
				}
			}
		case '{', '[', '(', '<':
			if err := token(); err != nil {
				return err
			}
			depth++
			if depth > l.MaxDepth {
				return fail("MaxDepth", l.MaxDepth, fmt.Sprintf("nested more than %d levels deep", l.MaxDepth))
			}
		case '}', ']', ')', '>':
			if err := token(); err != nil {
				return err
			}
			depth = max(0, depth-1)
		default:
			if err := token(); err != nil {
				return err
			}
		}
	}
	return nil
}
