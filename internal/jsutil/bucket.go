// Package jsutil holds the small JetStream idioms SemaQ's components share.
package jsutil

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket opens the key-value bucket cfg names, creating it with cfg when it
// does not exist. When another node creates it between the two steps, the
// bucket that node made is opened: every node of a cluster can call Bucket
// at start without coordinating. A bucket with fewer replicas than
// cfg.Replicas (made before the cluster grew) is raised to them; one with
// more keeps its own. Transient cluster errors are retried (Retry).
func Bucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := Retry(ctx, func(ctx context.Context) error {
		var err error
		kv, err = js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = js.KeyValue(ctx, cfg.Bucket)
			}
			// Nodes of a cluster starting together create the bucket
			// at once: the loser's create finds the stream in use, and
			// the stream it then reads may not be reachable yet.
			if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
				err = retryable{err}
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if _, err := RaiseReplicas(ctx, js, "KV_"+cfg.Bucket, cfg.Replicas); err != nil {
		return nil, err
	}
	return kv, nil
}

// EnsureStream creates the stream cfg names or updates it to cfg, keeping
// its replicas when it has more than cfg asks (a node starting while the
// cluster is short of nodes never lowers them). Transient cluster errors are
// retried (Retry), and so is a create that another node's create of the
// same stream beat (nodes starting together): the next attempt finds that
// stream and updates it.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	var st jetstream.Stream
	err := Retry(ctx, func(ctx context.Context) error {
		cur, err := js.Stream(ctx, cfg.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
		case err != nil:
			return err
		default:
			if r := cur.CachedInfo().Config.Replicas; r > cfg.Replicas {
				cfg.Replicas = r
			}
		}
		st, err = js.CreateOrUpdateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = retryable{err}
		}
		return err
	})
	return st, err
}

// BucketStream is the stream of a bucket Bucket just opened: a node that
// is starting may not see it yet, so not found is retried (Retry) until
// ctx ends.
func BucketStream(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.Stream, error) {
	var st jetstream.Stream
	err := Retry(ctx, func(ctx context.Context) error {
		var err error
		st, err = js.Stream(ctx, "KV_"+bucket)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return retryable{err}
		}
		return err
	})
	return st, err
}

// RaiseReplicas gives stream at least replicas replicas, through a stream
// update (JetStream copies the data to the new peers). It reports whether it
// changed anything; a stream that does not exist is left alone.
func RaiseReplicas(ctx context.Context, js jetstream.JetStream, stream string, replicas int) (bool, error) {
	changed := false
	err := Retry(ctx, func(ctx context.Context) error {
		st, err := js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		cfg := st.CachedInfo().Config
		if cfg.Replicas >= replicas {
			return nil
		}
		cfg.Replicas = replicas
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("raising %s to %d replicas: %w", stream, replicas, err)
	}
	return changed, nil
}

// ObjectBucket is Bucket for an object store: it opens the store cfg names,
// creating it when it does not exist, with the same tolerance of nodes
// starting together, and raises its stream's replicas to cfg.Replicas.
func ObjectBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	var os jetstream.ObjectStore
	err := Retry(ctx, func(ctx context.Context) error {
		var err error
		os, err = js.ObjectStore(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			os, err = js.CreateObjectStore(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				os, err = js.ObjectStore(ctx, cfg.Bucket)
			}
			if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
				err = retryable{err}
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if _, err := RaiseReplicas(ctx, js, "OBJ_"+cfg.Bucket, cfg.Replicas); err != nil {
		return nil, err
	}
	return os, nil
}

// LeaderReads turns off direct gets on bucket's stream, which KV buckets
// are made with, and opens the bucket again, so its reads go to the
// stream's leader: on a cluster a direct get may be answered by a replica
// that has not applied the last write. The stream just made by another
// node may not be found for a moment: that is retried too.
func LeaderReads(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	err := Retry(ctx, func(ctx context.Context) error {
		st, err := js.Stream(ctx, "KV_"+bucket)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return retryable{err}
		}
		if err != nil {
			return err
		}
		cfg := st.CachedInfo().Config
		if !cfg.AllowDirect {
			return nil
		}
		cfg.AllowDirect = false
		_, err = js.UpdateStream(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, err
	}
	var kv jetstream.KeyValue
	err = Retry(ctx, func(ctx context.Context) error {
		var err error
		kv, err = js.KeyValue(ctx, bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return retryable{err}
		}
		return err
	})
	return kv, err
}
