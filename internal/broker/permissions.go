package broker

import (
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/semaq/semaq/internal/broker/tokens"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// The NATS users of one node (docs/security.md has the table and the why):
//
//   - internal: the semantic layer's own connections. All rights: it is the
//     only writer of storage ($SQ.w.>, SQ_DLQ, SQ_TOKENS, the KV buckets). It
//     never publishes to a subject a client chose.
//   - egress: every message the broker sends to a subject a client chose
//     (API replies, fetch replies and job frames, filtered deliveries,
//     forwarded PubAcks, ingress refusals). It can reach clients and nothing
//     else: JetStream's API and acks, SemaQ's own subjects, KV, object
//     store and the system account are closed to it, so a reply subject
//     naming one of them is refused by the NATS server even if a check
//     above it were missed.
//   - front: the HTTP front door and the gateway. They act for HTTP clients,
//     so they get the public rights.
//   - public: every client without credentials (the no_auth_user).
const (
	publicUser = "semaq-public"
	frontUser  = "semaq-http"
)

// internalConsumers are consumers SemaQ creates under fixed names on user
// streams.
var internalConsumers = []string{reserved.DispatchConsumer}

// reservedForBroker are subjects only the broker may publish on, whoever
// else asks: the storage namespace, what the table's streams capture, and
// the JetStream calls that would change them behind its back.
func reservedForBroker(t *reserved.Table) []string {
	deny := []string{
		reserved.StoragePrefix + ">", // storage: only the ingress writes it
		semaq.QueueCancelPrefix + ">",
		"$KV.>",
		"$O.>",
		"$SYS.>",
		"$JS.EVENT.>", // forged advisories would make the broker dead-letter any message
		// Changing streams behind the semantic layer's back.
		"$JS.API.STREAM.CREATE.>",
		"$JS.API.STREAM.UPDATE.>",
		"$JS.API.STREAM.DELETE.>",
		"$JS.API.STREAM.PURGE.>",
		"$JS.API.STREAM.RESTORE.>",
		// A snapshot is delivered, with the server's rights, to a subject
		// the request names: backups are the node's (jsguard/).
		"$JS.API.STREAM.SNAPSHOT.>",
		reserved.JetStreamGuardPrefix + ">", // users reach it only through their imports
		"$JS.API.STREAM.MSG.DELETE.>",
		"$JS.API.STREAM.PEER.REMOVE.>",
		"$JS.API.STREAM.LEADER.STEPDOWN.>",
		"$JS.API.ACCOUNT.PURGE.>",
		"$JS.API.SERVER.>",
		"$JS.API.META.>",
	}
	deny = append(deny, t.Writes()...) // SQ_DLQ, stored token records
	// Hidden streams (identities, audit records): no client reads their
	// messages, by direct get, message get or a consumer without a name.
	for _, st := range t.Hidden() {
		deny = append(deny,
			"$JS.API.DIRECT.GET."+st,
			"$JS.API.DIRECT.GET."+st+".>",
			"$JS.API.STREAM.MSG.GET."+st,
			"$JS.API.CONSUMER.CREATE."+st)
	}
	return append(deny, reserved.InboxSubjects()...)
}

// consumerVerbs are the JetStream API calls that change a consumer or take
// its messages, with %s for the stream and %s for the consumer.
var consumerVerbs = []string{
	"$JS.API.CONSUMER.DELETE.%s.%s",
	"$JS.API.CONSUMER.PAUSE.%s.%s",
	"$JS.API.CONSUMER.CREATE.%s.%s",
	"$JS.API.CONSUMER.CREATE.%s.%s.>",
	"$JS.API.CONSUMER.DURABLE.CREATE.%s.%s",
	"$JS.API.CONSUMER.MSG.NEXT.%s.%s",
	"$JS.API.CONSUMER.LEADER.STEPDOWN.%s.%s",
	"$JS.API.CONSUMER.UNPIN.%s.%s",
	"$JS.ACK.%s.%s.>",     // acks, v1 form: $JS.ACK.<stream>.<consumer>...
	"$JS.ACK.*.*.%s.%s.>", // v2 form with domain and account hash
	"$JS.FC.%s.%s.>",      // flow control replies
}

// publicDeny is what the public (and front) users may not publish to.
func publicDeny(t *reserved.Table) []string {
	deny := reservedForBroker(t)
	// Session events come from the broker only: a forged one would reach
	// every subscriber of the tenant.
	deny = append(deny, semaq.SessionEventPrefix+">")
	// So do policy events (what a rule flagged or stopped).
	deny = append(deny, semaq.PolicyEventPrefix+">")
	// SemaQ's own consumers on user streams: the dispatcher's consumer
	// cannot be deleted, paused, redefined, pulled from or acked.
	for _, c := range internalConsumers {
		deny = append(deny, consumerDeny("*", c)...)
	}
	// Consumers of SemaQ's own streams, except those whose readers make
	// and delete their own (SQ_TOKENS).
	for _, st := range t.ClosedConsumers() {
		deny = append(deny, consumerDeny(st, "*")...)
	}
	return deny
}

func consumerDeny(stream, consumer string) []string {
	out := make([]string, 0, len(consumerVerbs))
	for _, v := range consumerVerbs {
		out = append(out, fmt.Sprintf(v, stream, consumer))
	}
	return out
}

// publicPermissions is what every client without credentials gets: public
// subjects, the SemaQ API, its own consumers; never storage, SemaQ's own
// consumers and streams, or the system account.
func publicPermissions(t *reserved.Table) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Deny: publicDeny(t)},
		// Answers to jobs carry the job's lease in their subject: only the
		// broker listens to them.
		Subscribe: &server.SubjectPermission{Deny: append([]string{
			semaq.QueueAckPrefix + ">",
			semaq.TokenWritePrefix + ">", // token writes carry the writer's key
			tokens.NodeWritePrefixAll + ">",
			"$SYS.>",
		}, reserved.InboxSubjects()...)},
	}
}

// egressPermissions is the egress user's: it publishes to clients'
// subjects only. It subscribes to the SemaQ API (its replies go out on the
// connection the request came in on).
func egressPermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Deny: append([]string{
			"$JS.>", "$SQ.>", "$KV.>", "$O.>", "$SYS.>", "$NRG.>", "$MQTT.>", "$G.>",
		}, reserved.InboxSubjects()...)},
	}
}

// nkeyUser is a NATS user known by its key, made for this process only.
type nkeyUser struct {
	kp  nkeys.KeyPair
	pub string
}

func newNkeyUser() (nkeyUser, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nkeyUser{}, fmt.Errorf("broker: generating credentials: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nkeyUser{}, fmt.Errorf("broker: generating credentials: %w", err)
	}
	return nkeyUser{kp: kp, pub: pub}, nil
}

// auth signs the server's nonce with the user's key.
func (u nkeyUser) auth() nats.Option {
	return nats.Nkey(u.pub, func(nonce []byte) ([]byte, error) { return u.kp.Sign(nonce) })
}

// nodeUsers are the node's own users; their keys never leave the process.
type nodeUsers struct {
	internal, egress, front nkeyUser
}

func newNodeUsers() (nodeUsers, error) {
	var u nodeUsers
	var err error
	for _, p := range []*nkeyUser{&u.internal, &u.egress, &u.front} {
		if *p, err = newNkeyUser(); err != nil {
			return u, err
		}
	}
	return u, nil
}
