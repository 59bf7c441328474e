//go:build !cgo

package confluent_test

import "testing"

// TestSerializers fails instead of vanishing when cgo is off: Confluent's
// serde packages import confluent-kafka-go/v2/kafka (for kafka.Header), a
// cgo binding of librdkafka, so they cannot be built without cgo.
func TestSerializers(t *testing.T) {
	t.Fatal("the Confluent serializer tests need cgo and a C compiler (confluent-kafka-go's serde packages import its librdkafka binding): run with CGO_ENABLED=1")
}
