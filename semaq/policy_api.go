package semaq

// ErrCodePolicy is the code of a message refused by a policy step of the
// ingress (package policy, docs/policy.md).
const ErrCodePolicy uint16 = 20120

// ErrPolicy matches a message a policy step refused.
var ErrPolicy = &APIError{Code: 400, ErrCode: ErrCodePolicy, Description: "refused by policy"}
