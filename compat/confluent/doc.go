// Package confluent proves that Confluent's Go schema registry client and
// serializers (github.com/confluentinc/confluent-kafka-go/v2/schemaregistry)
// work unchanged against SemaQ's registry REST API and its schema-on-write
// ingress. It is a module of its own so the root module does not take
// Confluent's dependencies; everything is in its tests (README.md).
package confluent
