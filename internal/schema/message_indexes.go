package schema

import "fmt"

// MessageIndexer is a Schema whose message types are named on the wire by
// Confluent's message-index prefix: the Protobuf format's schemas.
type MessageIndexer interface {
	Schema
	// MessageIndexes returns the prefix that names the message type
	// fullName (package included, as in "shop.Order.Line").
	MessageIndexes(fullName string) ([]byte, error)
}

// ProtobufMessageIndexes returns the Confluent message-index prefix that
// names the message type fullName of a Protobuf schema: what a producer
// writes after the magic byte and schema id, before the binary message.
// See protofmt's MessageIndexes for the encoding.
func ProtobufMessageIndexes(s Schema, fullName string) ([]byte, error) {
	mi, ok := s.(MessageIndexer)
	if !ok {
		return nil, fmt.Errorf("schema: message indexes need a Protobuf schema, not %s", s.Type())
	}
	return mi.MessageIndexes(fullName)
}
