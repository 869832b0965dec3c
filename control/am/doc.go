// Package am is the Aggregation Manager (AM) and the Host Coordinator of prismd.
//
// It owns:
//   - the runtime channel (HTTP/JSON over TCP, docs/protocol.md "Runtime
//     channel"): the JSON types in api.go, the server in http.go and the
//     client the rank library uses (client.go);
//   - the coordinator barrier: ranks of one invocation arrive with
//     POST /v1/begin, the AM waits for all of them, sets the tree up and only
//     then answers every rank with a START_GRANT (manager.go);
//   - tree selection (tree.go): leaves, root, merge points and the logical
//     edges resolved into ports and MACs across plain forwarding hops;
//   - the AM side of in-band setup (setup.go): CAPS_QUERY (paged) and whole
//     tuple matching, STAGE, COMMIT, COMPLETE, RELEASE and the ABORT rollback,
//     with CONTROL reliability (ctl.go: retransmission with the same
//     Transaction ID and identical bytes until the ACK or a bounded timeout);
//   - Operation ID and generation allocation (a reused Operation ID always gets
//     a strictly newer generation);
//   - preparation (prepare.go, Config.Prepare): a job's next invocation is set
//     up while the current one runs, and granted without a CONTROL exchange
//     when its ranks ask for exactly that, ABORTed otherwise;
//   - persistent operations (persistent.go): granted once, run invocation
//     after invocation by the ranks, kept alive by their keepalives
//     (POST /v1/ops/{id}/alive) instead of the progress watchdog, never
//     prepared for, and ABORTed on every node when every rank freed them;
//   - rank presence (presence.go): each rank's communicator holds
//     POST /v1/presence open; a rank whose stream closes and does not come
//     back within a second (its process died) fails the invocations that
//     wait for it at once, and is named in a granted operation's failure;
//   - its Prometheus metrics (metrics.go: a registry per Manager, served at
//     GET /metrics next to the runtime channel).
//
// It must not touch: the switch-side handling of CONTROL (package control),
// operation state inside a node (package engine), DATA/RESULT arithmetic
// (package kulisch) or the rank's data path (package host). It reads
// topologies through package deploy and sends CONTROL frames through a Conn,
// which is an AF_PACKET socket in production (OpenConn) and an in-process pipe
// in tests.
package am
