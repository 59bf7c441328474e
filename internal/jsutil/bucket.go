// Package jsutil holds the small JetStream idioms SemaQ's components share.
package jsutil

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket opens the key-value bucket cfg names, creating it with cfg when it
// does not exist. When another node creates it between the two steps, the
// bucket that node made is opened: every node of a cluster can call Bucket
// at start without coordinating.
func Bucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, cfg.Bucket)
	}
	return kv, err
}
