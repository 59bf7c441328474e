package semaq

// ErrPolicy matches a message a policy step of the ingress refused (package
// policy, docs/policy.md).
var ErrPolicy = &APIError{Code: 400, ErrCode: ErrCodePolicy, Description: "refused by policy"}
