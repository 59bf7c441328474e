// Package hostile holds the broker's hostile test suite: each test attacks
// a real broker as a public client would (stock NATS client, raw TCP, HTTP,
// a headless browser) and asserts the broker held. docs/security.md lists
// the classes of attack and the defence each test proves.
package hostile
