// Package editdist is the edit distance behind the "did you mean"
// suggestions of the CLI (a flag), the schema registry (a keyword) and
// filters (a payload field): a leaf with no imports.
package editdist

// maxLen bounds the names compared with a table: longer ones are as far
// as their length, which no suggestion is worth computing for.
const maxLen = 64

// Distance is the Levenshtein distance of a and b, in bytes.
func Distance(a, b string) int {
	if len(a) > maxLen || len(b) > maxLen {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
