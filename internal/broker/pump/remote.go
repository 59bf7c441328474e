package pump

import "github.com/semaq/semaq/internal/reserved"

// RemotePrefix is the prefix of the subjects the nodes of a cluster ask
// each other about the pumps they run (a key-shared group's pump runs on
// one node; members joining through another are sent there). It is one of
// the broker's own inboxes: only the broker may publish there or listen
// (docs/security.md), so a client can neither join a group past the
// checks of the node it asked nor read what the nodes say.
const RemotePrefix = reserved.PumpRemoteInbox
