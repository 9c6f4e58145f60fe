// Package natssink delivers watukuy events to NATS JetStream: each event is published, as
// the envelope every sink sends (sink.Envelope: json.Marshal of the watukuytype.Event), to a
// subject that may name the event's poller, partition and type, and Handle returns only once
// the stream has stored it (its PubAck came back).
//
// # Once
//
// Every message carries the event id in the Nats-Msg-Id header, and a JetStream stream drops a
// message whose Nats-Msg-Id it has stored within its duplicate window (StreamConfig.Duplicates,
// 2 minutes unless the stream says otherwise). The engine acks an event in its outbox after
// Handle returned; a worker that dies between the PubAck and that ack leaves the event to be
// delivered again by another worker, and that second publish, with the same id, is not
// stored: the stream holds the event once. So is a publish the stream stored but whose
// PubAck was lost (a timeout, a dropped connection), which the engine tries again. The PubAck
// of such a re-send says Duplicate, and Handle acks it like any stored message.
//
// This holds only while the re-send comes within the window: the window must be longer than
// the time a worker can take to deliver an event again, that is the poller's lease TTL (the
// time before another worker takes the key over) plus schedule.max (the time before the key's
// next cycle) plus the delivery retry waits of a sink outage. Past the window the stream stores
// the re-send a second time, and consumers fall back on deduplicating by the id (delivery is
// at least once everywhere else). Config.DuplicateWindow sets the window of a stream the sink
// creates (create: true); a stream created by other means keeps its own.
//
// # Connection
//
// New validates the config and connects nothing. The first Handle (or Probe) connects; one
// *nats.Conn serves every concurrent Handle of the Sink, and nats reconnects it after a drop.
// A Handle that finds the connection down (nats still reconnecting) does not wait for it: it
// dials again at once, so a delivery either goes out or reports the outage within
// Config.Timeout. Nothing is buffered while the connection is down: a message is either
// published on a live connection and confirmed, or the attempt fails. A connection that drops
// while a publish waits for its PubAck ends the wait at once (the PubAck cannot come on
// another connection), and Handle publishes once more on a new connection: safe, since the
// stream drops the second copy if the first was stored.
//
// # Errors
//
// Errors name the sink, the URL (credentials redacted), the stream, the subject and the event,
// and the client library's text is scrubbed of the URL's user, password and token:
//
//   - A failure any event would meet is watukuytype.SinkUnavailable: no connection (refused,
//     DNS, TLS, credentials), the connection lost during the publish, no stream capturing
//     the subject, the subject captured by another stream than Config.Stream, JetStream not
//     enabled, a stream that cannot be created, a closed Sink.
//   - A timeout waiting for the PubAck and any other failure the server reports is a
//     *watukuytype.SinkError (not Unreachable): the engine blocks the key when two events in
//     a row meet it.
//   - A refusal of the one message is a plain error: a subject that is not a valid NATS
//     subject once expanded (an empty token, a space, '*' or '>' in a poller, partition or
//     type), or a message larger than the server's max payload or the stream's max message
//     size.
//
// # Streams
//
// With Config.Stream set, every message carries Nats-Expected-Stream, so a message that
// another stream captures fails instead of being stored where nobody expects it, and
// Config.Create creates the stream when it is missing: subjects the Subject template with
// each token that holds a variable replaced by "*" (e.g. "watukuy.*.*" for
// "watukuy.${poller}.${type}"), file storage, the duplicate window. A poller, partition or
// type that holds a '.' gives a subject with more tokens, which such a stream does not
// capture. Probe creates nothing: it says whether the stream exists and captures the
// subjects, or what is missing.
package natssink
