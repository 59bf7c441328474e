package semaq

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Token streams (docs/tokens.md). A writer — usually a worker running a
// model — streams the output of one request as records in the JetStream
// stream TokenStream: content chunks on TokenChunkSubject(tenant, id), then
// one terminal record (final or error) on TokenEndSubject(tenant, id).
// Readers consume TokenSubjectFilter(tenant, id) and put records in order
// by Seq. The tenant is the requesting tenant's, which the broker sets
// (writers do not name it), so NATS permissions on the tenant token keep
// each tenant to its own streams (docs/security.md).
const (
	// TokenStream is the stream every token record is kept in.
	TokenStream = "SQ_TOKENS"
	// TokenPrefix starts every token subject: $SQ.tok.<tenant>.<request
	// id>.c for chunks and $SQ.tok.<tenant>.<request id>.end for the
	// terminal record.
	TokenPrefix = "$SQ.tok."
	// TokenNoTenant is the tenant token of a request made without a
	// tenant. No tenant can be named so ('$' is not allowed in a name).
	TokenNoTenant = "$none"
	// TokenAnyTenant, as the tenant of TokenSubjectFilter or
	// TokenLiveFilter, matches every tenant: for readers that may read
	// every tenant's streams (services, admins, the broker; docs/security.md).
	TokenAnyTenant = "*"

	// DefaultTokenRetention is how long a closed token stream stays
	// readable when its writer names no retention.
	DefaultTokenRetention = 5 * time.Minute
	// MaxTokenAge bounds the life of any token record: the stream's MaxAge,
	// which also removes streams whose writer never closed them.
	MaxTokenAge = 24 * time.Hour

	// HdrTokenRetention on a terminal record asks the broker to remove the
	// token stream this long after it (a Go duration; at most MaxTokenAge).
	HdrTokenRetention = "SQ-Token-Retention"

	// MaxRequestID is the longest request id.
	MaxRequestID = 128
)

// Where records go (docs/tokens.md, "Trust model"). Writers publish to the
// broker's token relay on TokenWritePrefix, with their writer key in
// HdrTokenKey; the relay checks key, record and limits and stores the
// record in the broker's storage namespace, which SQ_TOKENS captures and
// stores under TokenPrefix. JetStream republishes every stored record on
// TokenLivePrefix for live readers. Only the broker may publish there or
// in its store (both in the storage namespace $SQ.w., under a first token
// starting with '$', so no user stream can name them); stored subjects, and so readers' filters, are
// TokenPrefix+"<tenant>.<id>.c|end": the relay puts the requesting tenant
// there (TokenTenant), which the writer does not choose.
const (
	// TokenWritePrefix starts the subjects writers publish records to:
	// $SQ.TW.<request id>.c and $SQ.TW.<request id>.end.
	TokenWritePrefix = "$SQ.TW."
	// TokenLivePrefix is where JetStream republishes stored records, for
	// readers that subscribe rather than consume.
	TokenLivePrefix = "$SQ.w.$tokl."

	// HdrTokenKey carries the writer key on every record sent to the relay.
	// The relay removes it before storing.
	HdrTokenKey = "SQ-Token-Key"
	// MinTokenKey and MaxTokenKey bound a writer key's length.
	MinTokenKey = 16
	MaxTokenKey = 128
)

// Limits of token streams, enforced by the broker's relay and by SQ_TOKENS.
const (
	// DefaultTokenStreamMaxBytes bounds the bytes of records of one request.
	DefaultTokenStreamMaxBytes = 16 << 20
	// DefaultTokenStreamMaxRecords bounds the records of one request.
	DefaultTokenStreamMaxRecords = 100_000
	// DefaultTokenStoreMaxBytes bounds SQ_TOKENS as a whole; past it new
	// records are refused (never old answers evicted). SQ_TOKENS is in
	// memory by default, and a full store costs about twice this in RSS
	// (the Go heap's headroom): 256 MiB holds some 16,000 answers of 4,000
	// tokens, five minutes each after they end.
	DefaultTokenStoreMaxBytes = 256 << 20
	// DefaultTokenMaxStreams bounds the request ids the relay tracks at
	// once (open, or closed and waiting for their retention to pass).
	DefaultTokenMaxStreams = 1 << 18
	// MaxTokenRecordBytes bounds one record as sent to the relay.
	MaxTokenRecordBytes = 256 << 10
)

// The token relay's refusals, answered to the writer as JetStream-shaped
// errors in place of a PubAck.
var (
	// ErrTokenWriter matches a record refused because its sender is not
	// the stream's writer: no key, a wrong key, or a stream the broker
	// cannot tie to a writer (see docs/tokens.md).
	ErrTokenWriter = &APIError{Code: 403, ErrCode: ErrCodeTokenWriter, Description: "not this token stream's writer"}
	// ErrTokenRecord matches a malformed record, or one out of order.
	ErrTokenRecord = &APIError{Code: 400, ErrCode: ErrCodeTokenRecord, Description: "invalid token record"}
	// ErrTokenLimit matches a record past the limits of one request
	// (DefaultTokenStreamMaxBytes, DefaultTokenStreamMaxRecords,
	// MaxTokenRecordBytes).
	ErrTokenLimit = &APIError{Code: 413, ErrCode: ErrCodeTokenLimit, Description: "token stream limit reached"}
	// ErrTokenBusy matches a new stream refused because the broker tracks
	// DefaultTokenMaxStreams already; retry later.
	ErrTokenBusy = &APIError{Code: 503, ErrCode: ErrCodeTokenBusy, Description: "too many token streams"}
)

// TokenTenant is the tenant token of token subjects for tenant: the name
// itself, or TokenNoTenant for none (or for a name that is not a valid
// tenant name: with auth off, AI-Tenant is whatever a publisher wrote).
func TokenTenant(tenant string) string {
	if CheckName(tenant) != nil {
		return TokenNoTenant
	}
	return tenant
}

// tokenSegment is tenant as the reader side names it: TokenAnyTenant
// stays a wildcard, anything else is TokenTenant's.
func tokenSegment(tenant string) string {
	if tenant == TokenAnyTenant {
		return tenant
	}
	return TokenTenant(tenant)
}

// TokenChunkSubject is the subject the content chunks of request id of
// tenant are stored under.
func TokenChunkSubject(tenant, id string) string {
	return TokenPrefix + TokenTenant(tenant) + "." + id + ".c"
}

// TokenEndSubject is the subject the terminal record of request id of
// tenant is stored under.
func TokenEndSubject(tenant, id string) string {
	return TokenPrefix + TokenTenant(tenant) + "." + id + ".end"
}

// TokenWriteChunkSubject is where a writer sends the chunks of request id.
func TokenWriteChunkSubject(id string) string { return TokenWritePrefix + id + ".c" }

// TokenWriteEndSubject is where a writer sends the terminal record.
func TokenWriteEndSubject(id string) string { return TokenWritePrefix + id + ".end" }

// TokenLiveFilter matches the records of request id of tenant (or of any
// tenant: TokenAnyTenant) as JetStream republishes them once stored.
func TokenLiveFilter(tenant, id string) string {
	return TokenLivePrefix + tokenSegment(tenant) + "." + id + ".*"
}

// CheckTokenKey accepts writer keys: MinTokenKey to MaxTokenKey letters,
// digits, '-' and '_' (a job's lease is one).
func CheckTokenKey(key string) error {
	if len(key) < MinTokenKey || len(key) > MaxTokenKey {
		return fmt.Errorf("writer key has %d bytes; want %d to %d", len(key), MinTokenKey, MaxTokenKey)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("writer key has a byte %#x at %d; use letters, digits, '-' and '_'", c, i)
		}
	}
	return nil
}

// TokenSubjectFilter matches every stored record of request id of tenant
// (or of any tenant: TokenAnyTenant).
func TokenSubjectFilter(tenant, id string) string {
	return TokenPrefix + tokenSegment(tenant) + "." + id + ".*"
}

// ParseTokenSubject splits a stored token subject, $SQ.tok.<tenant>.<id>.c
// or .end (or the same under TokenLivePrefix), into the tenant token, the
// request id and whether it is the terminal record's.
func ParseTokenSubject(subj string) (tenant, id string, end, ok bool) {
	rest, found := strings.CutPrefix(subj, TokenPrefix)
	if !found {
		if rest, found = strings.CutPrefix(subj, TokenLivePrefix); !found {
			return "", "", false, false
		}
	}
	tenant, rest, found = strings.Cut(rest, ".")
	if !found || tenant != TokenNoTenant && CheckName(tenant) != nil {
		return "", "", false, false
	}
	switch {
	case strings.HasSuffix(rest, ".c"):
		id = rest[:len(rest)-2]
	case strings.HasSuffix(rest, ".end"):
		id, end = rest[:len(rest)-4], true
	default:
		return "", "", false, false
	}
	if CheckRequestID(id) != nil {
		return "", "", false, false
	}
	return tenant, id, end, true
}

// CheckRequestID accepts request ids that are safe as one subject token and
// in a URL path: 1 to MaxRequestID letters, digits, '-' and '_'.
func CheckRequestID(id string) error {
	if id == "" {
		return errors.New("request id is empty")
	}
	if len(id) > MaxRequestID {
		return fmt.Errorf("request id %q is longer than %d bytes", id, MaxRequestID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("request id %q has %q at byte %d; use letters, digits, '-' and '_'", id, c, i)
		}
	}
	return nil
}

// TokenChunk is one record of a token stream. Seq numbers the records of a
// stream from 1 without gaps, the terminal record included; Offset is the
// index of the chunk's first token in the output, and N how many tokens it
// carries (a writer that produces faster than the stream stores merges
// tokens into one chunk, and Lens then gives each token's length in bytes
// of Text). A record is content (Text and/or Func), or terminal: Final or
// Error, never both.
//
// Encoding (AppendTokenChunk / ParseTokenChunk): one JSON object with short
// keys, fields left out when empty:
//
//	{"s":seq,"o":offset,"n":tokens,"t":"text","l":[len,...],
//	 "f":{"i":index,"id":"call id","n":"name","a":"arguments fragment"},
//	 "tp":"traceparent","ss":"session",
//	 "fin":{"r":"finish reason","u":{"p":prompt,"c":completion,"t":total}},
//	 "err":{"c":"code","m":"message"}}
type TokenChunk struct {
	// RequestID is the stream's request id, taken from the subject; it is
	// not part of the record.
	RequestID   string                `json:"-"`
	Seq         uint64                `json:"s"`
	Offset      uint64                `json:"o"`
	N           int                   `json:"n,omitempty"`
	Text        string                `json:"t,omitempty"`
	Lens        []int                 `json:"l,omitempty"`
	Func        *FunctionCallFragment `json:"f,omitempty"`
	TraceParent string                `json:"tp,omitempty"`
	Session     string                `json:"ss,omitempty"`
	Final       *TokenFinal           `json:"fin,omitempty"`
	Error       *TokenError           `json:"err,omitempty"`
}

// FunctionCallFragment is a piece of a function (tool) call: the first
// fragment of call Index names it (ID, Name); later ones append to its
// JSON arguments.
type FunctionCallFragment struct {
	Index     int    `json:"i"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"n,omitempty"`
	Arguments string `json:"a,omitempty"`
}

// TokenFinal closes a stream normally.
type TokenFinal struct {
	FinishReason string      `json:"r"`
	Usage        *TokenUsage `json:"u,omitempty"`
}

// TokenUsage counts the tokens of a request.
type TokenUsage struct {
	Prompt     int `json:"p"`
	Completion int `json:"c"`
	Total      int `json:"t"`
}

// TokenError ends a stream with an error. It is an error itself and
// matches ErrTokenAborted.
type TokenError struct {
	Code    string `json:"c"`
	Message string `json:"m"`
}

func (e *TokenError) Error() string {
	if e.Message == "" {
		return "token stream aborted: " + e.Code
	}
	return "token stream aborted (" + e.Code + "): " + e.Message
}

// Is makes every *TokenError match ErrTokenAborted, and one with the same
// code match another.
func (e *TokenError) Is(target error) bool {
	if target == ErrTokenAborted {
		return true
	}
	t, ok := target.(*TokenError)
	return ok && t != nil && e != nil && t.Code == e.Code
}

// Error codes of aborted token streams.
const (
	// TokenErrWorkerLost: the worker serving the request stopped after it
	// had streamed part of the output; the output so far is all there is.
	TokenErrWorkerLost = "worker_lost"
	// TokenErrUpstream: the model behind the worker failed.
	TokenErrUpstream = "upstream_error"
	// TokenErrCancelled: the request was cancelled.
	TokenErrCancelled = "cancelled"
	// TokenErrDeadline: the request ran out of time.
	TokenErrDeadline = "deadline_exceeded"
)

// ErrTokenAborted matches every *TokenError.
var ErrTokenAborted = errors.New("token stream aborted")

// Terminal reports whether c ends its stream.
func (c *TokenChunk) Terminal() bool { return c.Final != nil || c.Error != nil }

// Limits of a record, checked by ParseTokenChunk.
const (
	// MaxTokenChunkTokens bounds N.
	MaxTokenChunkTokens = 1 << 20
	maxTokenField       = 4096 // traceparent, session, codes, names, ids
)

// Validate reports the first thing wrong with c as a record.
func (c *TokenChunk) Validate() error {
	if c.Seq == 0 {
		return errors.New("token record: seq must be 1 or more")
	}
	if c.N < 0 || c.N > MaxTokenChunkTokens {
		return fmt.Errorf("token record %d: n=%d is outside 0..%d", c.Seq, c.N, MaxTokenChunkTokens)
	}
	if c.Offset > 1<<62 {
		return fmt.Errorf("token record %d: offset %d is too large", c.Seq, c.Offset)
	}
	if c.Final != nil && c.Error != nil {
		return fmt.Errorf("token record %d: both final and error", c.Seq)
	}
	if c.Terminal() && (c.Text != "" || c.Func != nil || c.N != 0) {
		return fmt.Errorf("token record %d: a terminal record carries no tokens", c.Seq)
	}
	if len(c.Lens) > 0 {
		if len(c.Lens) != c.N {
			return fmt.Errorf("token record %d: %d lengths for %d tokens", c.Seq, len(c.Lens), c.N)
		}
		sum := 0
		for _, l := range c.Lens {
			if l < 0 || l > len(c.Text) {
				return fmt.Errorf("token record %d: token length %d out of range", c.Seq, l)
			}
			sum += l
		}
		if sum != len(c.Text) {
			return fmt.Errorf("token record %d: token lengths add up to %d, text has %d bytes", c.Seq, sum, len(c.Text))
		}
	}
	for _, f := range []string{c.TraceParent, c.Session} {
		if len(f) > maxTokenField {
			return fmt.Errorf("token record %d: a field is longer than %d bytes", c.Seq, maxTokenField)
		}
	}
	if f := c.Func; f != nil {
		if f.Index < 0 || f.Index > 1024 {
			return fmt.Errorf("token record %d: function call index %d is outside 0..1024", c.Seq, f.Index)
		}
		if len(f.ID) > maxTokenField || len(f.Name) > maxTokenField {
			return fmt.Errorf("token record %d: function call id or name longer than %d bytes", c.Seq, maxTokenField)
		}
	}
	if c.Final != nil {
		if c.Final.FinishReason == "" || len(c.Final.FinishReason) > maxTokenField {
			return fmt.Errorf("token record %d: final record needs a finish reason", c.Seq)
		}
		if u := c.Final.Usage; u != nil && (u.Prompt < 0 || u.Completion < 0 || u.Total < 0) {
			return fmt.Errorf("token record %d: negative usage", c.Seq)
		}
	}
	if c.Error != nil && (c.Error.Code == "" || len(c.Error.Code) > maxTokenField) {
		return fmt.Errorf("token record %d: error record needs a code", c.Seq)
	}
	return nil
}

// AppendTokenChunk appends the encoding of c to dst. It does not validate c.
func AppendTokenChunk(dst []byte, c *TokenChunk) []byte {
	dst = append(dst, `{"s":`...)
	dst = strconv.AppendUint(dst, c.Seq, 10)
	dst = append(dst, `,"o":`...)
	dst = strconv.AppendUint(dst, c.Offset, 10)
	if c.N != 0 {
		dst = append(dst, `,"n":`...)
		dst = strconv.AppendInt(dst, int64(c.N), 10)
	}
	if c.Text != "" {
		dst = append(dst, `,"t":`...)
		dst = AppendJSONString(dst, c.Text)
	}
	if len(c.Lens) > 0 {
		dst = append(dst, `,"l":[`...)
		for i, l := range c.Lens {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(l), 10)
		}
		dst = append(dst, ']')
	}
	if f := c.Func; f != nil {
		dst = append(dst, `,"f":{"i":`...)
		dst = strconv.AppendInt(dst, int64(f.Index), 10)
		dst = appendField(dst, "id", f.ID)
		dst = appendField(dst, "n", f.Name)
		dst = appendField(dst, "a", f.Arguments)
		dst = append(dst, '}')
	}
	dst = appendField(dst, "tp", c.TraceParent)
	dst = appendField(dst, "ss", c.Session)
	if fin := c.Final; fin != nil {
		dst = append(dst, `,"fin":{"r":`...)
		dst = AppendJSONString(dst, fin.FinishReason)
		if u := fin.Usage; u != nil {
			dst = append(dst, `,"u":{"p":`...)
			dst = strconv.AppendInt(dst, int64(u.Prompt), 10)
			dst = append(dst, `,"c":`...)
			dst = strconv.AppendInt(dst, int64(u.Completion), 10)
			dst = append(dst, `,"t":`...)
			dst = strconv.AppendInt(dst, int64(u.Total), 10)
			dst = append(dst, '}')
		}
		dst = append(dst, '}')
	}
	if e := c.Error; e != nil {
		dst = append(dst, `,"err":{"c":`...)
		dst = AppendJSONString(dst, e.Code)
		dst = append(dst, `,"m":`...)
		dst = AppendJSONString(dst, e.Message)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

func appendField(dst []byte, key, v string) []byte {
	if v == "" {
		return dst
	}
	dst = append(dst, ',', '"')
	dst = append(dst, key...)
	dst = append(dst, '"', ':')
	return AppendJSONString(dst, v)
}

// AppendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json does; HTML characters are not escaped.
func AppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 end lines in JavaScript; escape them as
		// encoding/json does, for readers that eval.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// ParseTokenChunk decodes and validates one record. Unknown keys are
// ignored, so newer writers can add fields.
func ParseTokenChunk(data []byte) (*TokenChunk, error) {
	var c TokenChunk
	if !parsePlainChunk(data, &c) {
		c = TokenChunk{}
		if err := json.Unmarshal(data, &c); err != nil {
			return nil, fmt.Errorf("token record is not valid JSON: %w", err)
		}
	}
	if len(c.Lens) == 0 {
		c.Lens = nil // "l":[] says nothing
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// parsePlainChunk decodes the common record quickly: a content record as
// AppendTokenChunk writes it, with keys s, o, n, t, tp, ss only and strings
// without escapes. Anything else returns false and goes to encoding/json;
// FuzzTokenChunk checks that both agree.
func parsePlainChunk(b []byte, c *TokenChunk) bool {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return false
	}
	i := 1
	seen := 0
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			j++
		}
		if j+1 >= len(b) || b[j+1] != ':' {
			return false
		}
		key := string(b[i+1 : j])
		i = j + 2
		var bit int
		switch key {
		case "s", "o", "n":
			n, k, ok := plainUint(b, i)
			if !ok {
				return false
			}
			i = k
			switch key {
			case "s":
				c.Seq, bit = n, 1
			case "o":
				c.Offset, bit = n, 2
			default:
				if n > MaxTokenChunkTokens {
					return false
				}
				c.N, bit = int(n), 4
			}
		case "t", "tp", "ss":
			v, k, ok := plainString(b, i)
			if !ok {
				return false
			}
			i = k
			switch key {
			case "t":
				c.Text, bit = v, 8
			case "tp":
				c.TraceParent, bit = v, 16
			default:
				c.Session, bit = v, 32
			}
		default:
			return false
		}
		if seen&bit != 0 {
			return false // a repeated key: encoding/json's rules decide
		}
		seen |= bit
		switch {
		case i < len(b) && b[i] == ',':
			i++
		case i == len(b)-1:
			return true
		default:
			return false
		}
	}
}

func plainUint(b []byte, i int) (uint64, int, bool) {
	start := i
	var n uint64
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if n > (1<<63)/10 {
			return 0, 0, false
		}
		n = n*10 + uint64(b[i]-'0')
		i++
	}
	if i == start || (b[start] == '0' && i-start > 1) {
		return 0, 0, false
	}
	return n, i, true
}

// plainString reads a JSON string without escapes or control characters,
// in valid UTF-8.
func plainString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	j := i + 1
	for j < len(b) && b[j] != '"' {
		if c := b[j]; c == '\\' || c < 0x20 {
			return "", 0, false
		}
		j++
	}
	if j >= len(b) {
		return "", 0, false
	}
	v := b[i+1 : j]
	if !utf8.Valid(v) {
		return "", 0, false
	}
	return string(v), j + 1, true
}

// APITokenStatus answers whether the broker knows request id's token stream
// (TokenStatusRequest -> TokenStatus), on every node. It reads memory and at
// most two stored records, so a front door can ask before it opens a stream.
const APITokenStatus = "$SQ.API.TOKENS.STATUS"

// ErrTokenStreamNotFound matches a read of a token stream the broker never
// issued: no stored record, no writer's claim, no queued or held request
// with that Nats-Msg-Id (or one whose records were removed after their
// retention).
var ErrTokenStreamNotFound = &APIError{Code: 404, ErrCode: ErrCodeTokenStreamNotFound, Description: "token stream not found"}

// TokenStatusRequest asks about the token stream of one request id.
type TokenStatusRequest struct {
	ID string `json:"id"`
}

// TokenStatus is what the broker knows of one request id's token stream.
// Known is true when SQ_TOKENS holds records of it, a writer has claimed it
// (its first record is on its way), or a work queue holds a request with
// that Nats-Msg-Id (queued, or held by a worker that has written nothing
// yet). Records is the number of the last record stored (0: none yet);
// Offset the token offset after it (where the next record starts); Ended
// says the terminal record is stored, Final that it is a final record (an
// ended stream without it ended with an error).
type TokenStatus struct {
	ID      string `json:"id"`
	Known   bool   `json:"known"`
	Records uint64 `json:"records"`
	Offset  uint64 `json:"offset,omitempty"`
	Ended   bool   `json:"ended"`
	Final   bool   `json:"final,omitempty"`
}
