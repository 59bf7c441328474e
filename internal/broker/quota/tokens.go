package quota

import "github.com/semaq/semaq/semaq"

// RequestTokens is what a request counts in prompt tokens: declared
// (AI-Prompt-Tokens; -1 when the sender did not say) or estimated from its
// payload of dataLen bytes. Queue admission, the scheduler's fair share
// and the tenants' quotas all count this.
func RequestTokens(declared int64, dataLen int) int64 {
	if declared < 0 {
		return EstimateTokens(dataLen)
	}
	return declared
}

// EstimateTokens guesses the prompt tokens of a payload that does not say:
// about four bytes a token for English text and JSON.
func EstimateTokens(n int) int64 {
	return int64((n + semaq.CharsPerToken - 1) / semaq.CharsPerToken)
}
