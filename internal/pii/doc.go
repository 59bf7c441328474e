// Package pii finds personal data and secrets in text and JSON payloads and redacts them. The broker runs it at
// its ingress (before the schema check), over token streams as workers write them, and at the OpenAI gateway's
// egress, where Restore puts tokenized values back. It is a pure library: it keeps no state between calls.
//
// # Entity types
//
// Each type is found by one or more Detectors: an RE2 pattern for candidates and a Validate check. A value must
// also stand alone: a digit, letter or underscore next to it, a '-' or '.' joining it to a digit, or a '-'
// after it joining it to a letter, means it is part of a longer token and not the entity. The rules, by type:
//
//   - email: local@domain. The local part is 1-64 of [A-Za-z0-9._%+-], not starting or ending with '.' nor
//     holding "..". The domain is at least two dot-separated labels of letters, digits and inner '-' (1-63 each),
//     the last a TLD of 2-24 letters that is not a common file extension ("icon@2x.png" is a file name).
//     Quoted local parts and IP-literal domains are not looked for.
//   - phone: two shapes only, for precision on order numbers, dates, versions and prices. International: '+', a
//     country code and digit groups split by one space, dash or dot (a space may mix with one other) or a
//     parenthesised area code, which libphonenumber's metadata (github.com/nyaruka/phonenumbers, IsValidNumber)
//     finds valid. Chinese mobile: 1[3-9] and nine more digits, together or as 3-4-4 split by a space or dash,
//     optionally after +86 or 0086, a valid CN mobile number. Other national formats ("(415) 555-2671"), which
//     cannot be told from other numbers without their country code, are not looked for.
//   - cn-id: a Chinese resident identity number: 17 digits and a check character (a digit, X or x); the region
//     code's first digit is 1-6 or 8; digits 7-14 are a birth date YYYYMMDD from 1900-01-01 to today; the check
//     character is ISO 7064 MOD 11-2 of the 17 digits.
//   - card: a payment card number: 13-19 digits, together or in groups of 3-6 split by one space or one dash (the
//     same throughout); Luhn valid; in a known issuer range at a length it uses: Visa 4 (13, 16, 19), Mastercard
//     51-55 and 2221-2720 (16), American Express 34 and 37 (15), Discover 6011, 644-649 and 65 (16-19), UnionPay
//     62 (16-19), JCB 3528-3589 (16-19), Diners Club 36, 38 and 300-305 (14-16).
//   - iban: two capitals, two check digits and the BBAN, together or in groups of four split by single spaces;
//     as long as the country's IBANs are (the SWIFT registry's table); the ISO 13616 mod 97 check gives 1.
//     Lower-case IBANs are not looked for.
//   - ssn: a US social security number written ddd-dd-dddd or ddd dd dddd, or as nine bare digits within 40
//     bytes after "SSN" or "social security" (in any case); the area is not 000, 666 or 9xx, the group not 00,
//     the serial not 0000. The finding is the number only, not the keyword.
//   - ip: an IPv4 dotted quad of 0-255 without leading zeros, not part of a longer dotted run (the version
//     "1.2.3.4.5" is not an address) nor right after a word that makes it a version or a section number
//     ("version", "v", "rev", "release", "build", "firmware", "chapter", "section", ...); or an IPv6 address
//     that net/netip parses, "::" forms and an embedded IPv4 included, zones refused, holding at least one
//     decimal digit (so that a scope such as "A::B" is not one).
//   - secret: API and cloud keys by their shapes. AWS access key id: AKIA or ASIA and 16 capitals or digits.
//     GitHub: gh[pousr]_ and 36-251 letters or digits, or github_pat_ and 22-244 letters, digits or '_'. OpenAI:
//     sk-, sk-proj-, sk-svcacct- or sk-admin- and 20-200 of [A-Za-z0-9_-] holding a digit, a capital and a
//     small letter (so "sk-learn-compatible-models" is not one). Slack: xox[abprs]- and 10-250 of [A-Za-z0-9-]
//     holding a digit. Google: AIza and 35 of [A-Za-z0-9_-]. Stripe: sk_live_ or rk_live_ and 16 or more letters
//     or digits. A PEM private key: the finding is its "-----BEGIN ... PRIVATE KEY-----" line only, as the
//     base64 body cannot be told from other data; a policy that must drop the whole key should block. A JWT:
//     three base64url parts split by dots (the signature may be empty), the first decoding to a JSON object
//     with an "alg" member, 16 KiB at most.
//
// # Scanning
//
// Scan returns the findings of a text sorted by offset and without overlaps (the leftmost wins, then the
// longest). It first makes one pass over the bytes that notes which types could occur (an '@', digit runs of
// the right length, "::", the fixed prefixes of keys, "-----", a dot in a base64url run that starts like a
// JSON object); a text with none costs that pass and no allocation. Only the windows around candidates see a
// regular expression, the validators and libphonenumber. A candidate that fails is retried on its sub-spans
// between separators (a card after a quantity, a phone number followed by a year).
//
// A hostile text made of candidates costs time linear in its length: libphonenumber (some 40 µs a number)
// checks the first 256 phone candidates of a text, and the rest get a structural check (a country code it knows
// and a national number of 4 to 14 digits), which errs towards redacting; a candidate of more than 12 groups is
// not retried; a Redactor stops scanning past its finding limit.
//
// Detectors gives the same patterns and checks to a scanner of streams, with MaxLen to bound the tail it holds
// back. Validate alone has no budget and no context, so a stream scanner that wants Scan's precision can run
// Scan over its window.
//
// # Redaction
//
// A Redactor, built once from a Config by NewRedactor and safe for concurrent use, redacts payloads. A payload
// whose first non-space byte is '{' or '[' and that is valid JSON has its string values redacted (object keys
// never are): those at Config.Paths, dotted paths whose segments are object keys or array indexes, '*' for any
// ("messages.*.content", "prompt"), each selecting the value at it and every string inside that value; all
// strings when there are no paths. Strings with escapes are decoded before they are scanned and encoded again
// when rewritten; nothing else in the payload changes, and it stays valid JSON. JSON nested deeper than MaxDepth
// is refused with ErrTooDeep. Any other payload is redacted as one text. A payload without findings is returned
// as it came, without allocating.
//
// The actions: mask writes Mask(type), "[EMAIL]"; hash writes "[EMAIL:" and the first 12 hex digits of
// HMAC-SHA256(Config.HashKey, value) and "]", stable for a key; tokenize writes what the caller's Tokenizer
// returns (Placeholder(type, n), "<EMAIL_1>"), called once per distinct type and value in a payload; block
// redacts nothing and returns a *BlockedError (errors.Is(err, ErrBlocked)) naming the type and the JSON Pointer
// of the string, never the value. A payload with more than Config.MaxFindings entities is refused with
// ErrTooManyFindings.
//
// FindPlaceholders and Restore work the other way, on text holding placeholders.
package pii
