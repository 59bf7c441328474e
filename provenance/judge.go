package provenance

import (
	"encoding/hex"
	"fmt"
	"slices"
)

// judge walks the links in the export's order and returns the first bad
// one, nil when there is none.
//
// Where two lines contend for one place in the chain (two links of one
// number, or a link and its successor that does not name it), the one
// the rest of the chain vouches for is the genuine one (rank), so a
// forged link that hashes correctly is the one reported, not the link it
// displaced.
func (v *verifier) judge() *Problem {
	want := uint64(1)        // the number the next link must have
	acc := make([]int, 0, 1) // acc[k-1]: the index of the accepted link k
	headLinks := v.h.Head.Links
	for i := range v.links {
		f := &v.links[i]
		if f.local != nil {
			return f.local
		}
		switch {
		case f.chainSeq > headLinks:
			return v.at(f, Inserted, "the head says the chain has %d links", headLinks)
		case f.chainSeq == want:
			if want == 1 && f.hasPrev {
				return v.at(f, Inserted, "it has an %s, which a chain's first link has not", HdrPrevHash)
			}
			if want > 1 {
				pi := acc[want-2]
				p := &v.links[pi]
				if !f.hasPrev || f.prev != p.hash {
					if v.rank(pi) < v.rank(i) {
						return v.at(p, Modified, "it hashes to its %s, but link %d (stream seq %d) follows another link %d: this one was replaced or re-hashed",
							HdrHash, f.chainSeq, f.streamSeq, p.chainSeq)
					}
					return v.at(f, Inserted, "its %s does not name link %d (stream seq %d)", HdrPrevHash, p.chainSeq, p.streamSeq)
				}
			}
			if p := v.signature(f); p != nil {
				return p
			}
			acc = append(acc, i)
			want++
		case f.chainSeq > want:
			if j := v.later(i, want); j >= 0 {
				g := &v.links[j]
				if v.rank(i) > 0 {
					return v.at(f, Reordered, "it comes before link %d (stream seq %d)", want, g.streamSeq)
				}
				return v.at(f, Inserted, "it stands before link %d (stream seq %d), and no link of the chain follows it", want, g.streamSeq)
			}
			var detail string
			if want == 1 {
				detail = fmt.Sprintf("the export starts with link %d (stream seq %d)", f.chainSeq, f.streamSeq)
			} else {
				p := &v.links[acc[want-2]]
				detail = fmt.Sprintf("link %d (stream seq %d) is followed by link %d (stream seq %d)", p.chainSeq, p.streamSeq, f.chainSeq, f.streamSeq)
			}
			return &Problem{Kind: Missing, Link: want, LastLink: f.chainSeq - 1, Detail: detail}
		default: // a number already taken
			ei := acc[f.chainSeq-1]
			e := &v.links[ei]
			switch {
			case e.hash == f.hash:
				return v.at(f, Inserted, "a copy of link %d (stream seq %d)", e.chainSeq, e.streamSeq)
			case v.rank(ei) < v.rank(i):
				return v.at(e, Inserted, "the chain goes on from another link %d (stream seq %d), not this one", f.chainSeq, f.streamSeq)
			}
			return v.at(f, Inserted, "a second link %d; the chain goes on from the one at stream seq %d", f.chainSeq, e.streamSeq)
		}
	}
	got := want - 1
	if got < headLinks {
		detail := fmt.Sprintf("the export holds no link; the head says %d", headLinks)
		if got > 0 {
			last := &v.links[acc[got-1]]
			detail = fmt.Sprintf("the export ends at link %d (stream seq %d); the head says %d links", got, last.streamSeq, headLinks)
		}
		return &Problem{Kind: Missing, Link: got + 1, LastLink: headLinks, Detail: detail}
	}
	if last := &v.links[acc[got-1]]; last.hash != v.headHash {
		return v.at(last, Modified, "its %s is not the head's hash %s", HdrHash, v.h.Head.Hash)
	}
	return nil
}

// signature checks an accepted link's signature, when the chain is
// signed, and notes its signer.
func (v *verifier) signature(f *fact) *Problem {
	if !v.signed {
		return nil
	}
	switch f.sig {
	case sigNone:
		if v.pinned && v.h.Provenance != "signed" && len(v.signers) == 0 {
			return v.at(f, BadSignature, "it is not signed (no %s), and trusted keys were given", HdrSignature)
		}
		return v.at(f, BadSignature, "it is not signed (no %s), and the chain is", HdrSignature)
	case sigBad:
		return v.at(f, BadSignature, "%s", f.sigDetail)
	}
	if !slices.Contains(v.signers, f.keyID) {
		v.signers = append(v.signers, f.keyID)
	}
	return nil
}

// later is the index of the first line after i that is link n, -1 if
// none is.
func (v *verifier) later(i int, n uint64) int {
	for j := i + 1; j < len(v.links); j++ {
		if g := &v.links[j]; g.local == nil && g.chainSeq == n {
			return j
		}
	}
	return -1
}

// rank is how much the rest of the export vouches for line i: 2 if it is
// on the chain that ends at the head (walked back from the head's hash
// through each link's AI-Prev-Hash), 1 if a link names it as its
// predecessor, 0 if nothing does.
func (v *verifier) rank(i int) uint8 {
	if v.ranks == nil {
		v.ranks = make([]uint8, len(v.links))
		byHash := make(map[[32]byte]int, len(v.links))
		named := make(map[[32]byte]bool, len(v.links))
		for j := range v.links {
			f := &v.links[j]
			if !f.hashed {
				continue
			}
			if _, ok := byHash[f.hash]; !ok {
				byHash[f.hash] = j
			}
			if f.hasPrev {
				named[f.prev] = true
			}
		}
		for j := range v.links {
			if f := &v.links[j]; f.hashed && (named[f.hash] || f.hash == v.headHash) {
				v.ranks[j] = 1
			}
		}
		cur := v.headHash
		for range v.links { // a cycle of hashes cannot hold it longer
			j, ok := byHash[cur]
			if !ok {
				break
			}
			v.ranks[j] = 2
			if !v.links[j].hasPrev {
				break
			}
			cur = v.links[j].prev
		}
	}
	return v.ranks[i]
}

// anchor finds the link whose hash is the trusted head.
func (v *verifier) anchor(head string, at *uint64) *Problem {
	var want [32]byte
	_, _ = hex.Decode(want[:], []byte(head)) // checked by Verify
	for i := range v.links {
		if f := &v.links[i]; f.hash == want {
			*at = f.chainSeq
			return nil
		}
	}
	return &Problem{Kind: NotAnchored, Detail: fmt.Sprintf("the trusted head %s is not the hash of any link of this chain: it was rewritten, or is another chain", head)}
}

func (v *verifier) at(f *fact, kind Kind, format string, args ...any) *Problem {
	return &Problem{Kind: kind, Link: f.chainSeq, StreamSeq: f.streamSeq, Line: f.line, Detail: fmt.Sprintf(format, args...)}
}
