// Package doctest runs the shell examples of README.md and docs/*.md against a real broker, so the docs cannot
// drift from what the binary does. The parser lives here; the runner is TestDocs in doctest_test.go.
//
// A runnable example is a fenced block opened with ```sh. Inside it:
//
//   - Every line that is not a comment starts a command; a line ending in `\` continues it, and a heredoc
//     (`<<'EOF'` ... `EOF`) is part of the command that opens it.
//   - A command is expected to exit 0. A trailing comment `# exit N ...` expects status N, `# fails ...` any
//     non-zero status.
//   - Comment lines right after a command (no blank line between) show its output: each one's text, without
//     the `# `, must appear in what the command printed (stdout and stderr). One that starts with `semaq: ` is
//     the CLI's error line, so the command is expected to fail unless it says `# exit N` itself.
//   - A command ending in `&` runs in the background until the file's examples are done.
//
// A block the test cannot run here is opted out by a line before its fence, which must say why:
//
//	<!-- doctest: skip (needs a RabbitMQ on 5672) -->
package doctest

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// AnyFailure is Cmd.Exit for a command that must exit non-zero, whatever the status.
const AnyFailure = -1

// Block is one ```sh block of a Markdown file.
type Block struct {
	Line int    // line of the opening fence, 1-based
	Skip string // why the block is not run; "" runs it
	Cmds []Cmd
}

// Cmd is one shell command of a block, as a user would type it.
type Cmd struct {
	Line       int      // first line in the file, 1-based
	Text       string   // the command with its continuation and heredoc lines, trailing comments removed
	Background bool     // ends in `&`
	Exit       int      // expected exit status, or AnyFailure
	Want       []string // substrings expected in its output
}

var (
	skipRE    = regexp.MustCompile(`^<!--\s*doctest:\s*skip\s*(.*?)\s*-->$`)
	heredocRE = regexp.MustCompile(`<<-?\s*(?:'(\w+)'|"(\w+)"|(\w+))`)
	exitRE    = regexp.MustCompile(`^exit (\d+)\b`)
)

// Parse returns the ```sh blocks of a Markdown document. A skip marker without a reason in parentheses is an
// error, as is an unterminated block or heredoc.
func Parse(r io.Reader) ([]Block, error) {
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var (
		blocks  []Block
		skip    string
		hasSkip bool
	)
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if m := skipRE.FindStringSubmatch(line); m != nil {
			reason := strings.TrimSuffix(strings.TrimPrefix(m[1], "("), ")")
			if !strings.HasPrefix(m[1], "(") || strings.TrimSpace(reason) == "" {
				return nil, fmt.Errorf("line %d: a doctest skip must give its reason: <!-- doctest: skip (why) -->", i+1)
			}
			skip, hasSkip = reason, true
			continue
		}
		if !strings.HasPrefix(line, "```") {
			if line != "" {
				skip, hasSkip = "", false // a marker belongs to the fence right after it
			}
			continue
		}
		lang := strings.TrimSpace(strings.TrimPrefix(line, "```"))
		end := i + 1
		for end < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[end]), "```") {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("line %d: code block is not closed", i+1)
		}
		if lang == "sh" {
			b := Block{Line: i + 1, Skip: skip}
			cmds, err := parseCmds(lines[i+1:end], i+2)
			if err != nil {
				return nil, err
			}
			b.Cmds = cmds
			blocks = append(blocks, b)
		} else if hasSkip {
			return nil, fmt.Errorf("line %d: doctest skip marker before a %q block, not ```sh", i+1, lang)
		}
		skip, hasSkip = "", false
		i = end
	}
	return blocks, nil
}

// parseCmds splits the lines of one block into commands; first is the file line of lines[0].
func parseCmds(lines []string, first int) ([]Cmd, error) {
	var (
		cmds []Cmd
		last = -1 // index in cmds of the command that comment lines may describe
	)
	for i := 0; i < len(lines); i++ {
		raw := lines[i]
		trimmed := strings.TrimSpace(raw)
		switch {
		case trimmed == "":
			last = -1
			continue
		case strings.HasPrefix(trimmed, "#"):
			if last >= 0 {
				want := strings.TrimSpace(strings.TrimPrefix(trimmed, "#"))
				c := &cmds[last]
				c.Want = append(c.Want, want)
				if strings.HasPrefix(want, "semaq: ") && c.Exit == 0 {
					c.Exit = AnyFailure
				}
			}
			continue
		}
		c := Cmd{Line: first + i}
		var text []string
		var comment string
		for {
			code, cm := splitComment(lines[i])
			comment = cm
			text = append(text, strings.TrimRight(code, " \t"))
			if !strings.HasSuffix(text[len(text)-1], "\\") || i+1 == len(lines) {
				break
			}
			i++
		}
		body := strings.Join(text, "\n")
		if m := heredocRE.FindStringSubmatch(body); m != nil {
			word := m[1] + m[2] + m[3]
			for {
				i++
				if i == len(lines) {
					return nil, fmt.Errorf("line %d: heredoc %s is not closed", c.Line, word)
				}
				text = append(text, lines[i])
				if strings.TrimSpace(lines[i]) == word {
					break
				}
			}
		}
		c.Text = strings.Join(text, "\n")
		c.Background = strings.HasSuffix(body, "&") && !strings.HasSuffix(body, "&&")
		if m := exitRE.FindStringSubmatch(comment); m != nil {
			c.Exit, _ = strconv.Atoi(m[1])
		} else if strings.HasPrefix(comment, "fails") {
			c.Exit = AnyFailure
		}
		cmds = append(cmds, c)
		last = len(cmds) - 1
	}
	return cmds, nil
}

// splitComment splits a shell line at a `#` that starts a comment: outside quotes, at the start or after
// whitespace. It returns the code and the comment text without the `#`.
func splitComment(line string) (code, comment string) {
	var single, double, escaped bool
	for i, r := range line {
		switch {
		case escaped:
			escaped = false
		case r == '\\' && !single:
			escaped = true
		case r == '\'' && !double:
			single = !single
		case r == '"' && !single:
			double = !double
		case r == '#' && !single && !double && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i], strings.TrimSpace(line[i+1:])
		}
	}
	return line, ""
}
