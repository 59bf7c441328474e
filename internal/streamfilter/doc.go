// Package streamfilter filters text that arrives in chunks, such as a
// language model's answer token by token, against a set of rules: RE2
// patterns, each with an optional validator and an action (mask the match,
// stop the stream, or flag it). It holds back only the text at the end of
// what has arrived that could still be the start of a match, so an entity
// split across chunks is caught as if the text had come whole.
//
// # The automaton
//
// Compile parses every rule's pattern with regexp/syntax and joins the
// programs into one. A Stream runs it as a Thompson NFA (a Pike VM without
// captures), one rune at a time, only over new text: a thread is an
// instruction and the offset where its match attempt began, and a new
// attempt begins at every rune. Two threads at one instruction behave alike
// from then on, so only the one with the earliest start is kept; the work
// per byte is bounded by the programs' size.
//
// After each chunk the hold point is the start of the oldest thread still
// alive, or the end of the text when none is. A match that starts before
// the hold point is complete: nothing can extend it, and nothing new can
// start there. Those matches are found with package regexp over the held
// text, leftmost-first within a rule; across rules the earliest start wins,
// then the longest, then the rule listed first. They are acted on and the
// text is released up to the hold point or the end of the last match,
// whichever is later. The regexp runs only for a rule the automaton saw
// complete a match, so text without matches costs one pass of the NFA.
//
// Liveness ignores the priority between a pattern's alternatives: after
// "<b>" has matched <.*?>, the attempt that could still become "<b>x>" is
// alive, so a lazy repeat holds text until it can no longer go on (here, a
// newline) or MaxHold forces it out. The outcome is still leftmost-first.
//
// A rune split across chunks waits for its last byte. An empty-width
// assertion that looks at the next rune (\b, \B, $, \z) is undecided at the
// end of the text: a thread waiting on one is alive, so "foo" is held by
// \bfoo\b until the next chunk (or Flush, which decides it as the end of
// the text). Assertions at the start of the held text look at the last byte
// released, which is kept for that.
//
// # The bound
//
// A stream holds at most Options.MaxHold bytes (256 by default), plus the
// bytes of a rune not yet complete. When the oldest live thread began
// further back, the text is released up to MaxHold bytes from the end
// anyway, and Stats().Forced counts it: a match longer than MaxHold, or one
// starting in text released that way, may be missed. The bound beats a
// perfect match.
//
// # Rules
//
// A pattern that can match the empty string is refused: it would match
// everywhere. A validator that refuses a match (say, a card number failing
// the Luhn check) makes it no match, and the rule looks again from the
// next rune. Matches do not overlap: after one, every rule looks again from
// its end. Event offsets are those of the original text.
//
// A Set is immutable and safe for concurrent use; a Stream is not.
package streamfilter
