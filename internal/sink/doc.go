// Package sink holds the sinks of the config-driven worker (docs/design.md, Delivery): Webhook
// (Standard Webhooks), Stream (XADD to a Redis stream) and Stdout (NDJSON). Each sink's
// Handle method is a watukuytype.Handler: a nil error acks the event, an error is a failed attempt
// that the engine retries with backoff and finally parks.
//
// Every sink emits the same bytes for one event: Envelope(ev), which is json.Marshal of the
// watukuytype.Event (id, poller, partition, type, lane, identity, version, seq, observedAt,
// schemaVersion, item). Receivers deduplicate by the event id: delivery is at least once, and
// a redelivered event keeps its id.
//
// Decisions the design left open, written down here:
//
//   - Webhook follows https://www.standardwebhooks.com/: webhook-id is the event id (the same
//     on every retry, so receivers use it as the idempotency key), webhook-timestamp is the
//     time of the attempt in unix seconds, and webhook-signature holds one "v1,<base64 HMAC>"
//     per configured secret, space-separated, so a receiver can rotate its secret without
//     downtime: configure old and new, switch the receiver, then drop the old one.
//   - Signing and verifying are package webhook's (github.com/watukuy/watukuy/webhook), the
//     public package receivers use, so sender and receivers share one implementation; Sign,
//     Verify, the header names and the errors here are its, with a "sink: " prefix. Secrets
//     must be "whsec_" + standard base64 of at least 24 bytes (the spec asks for 24 to 64
//     random bytes); surrounding whitespace (a trailing newline from a secret file) is
//     ignored. Errors name a secret by position, never by any part of its value.
//   - Only 2xx acks. Redirects are not followed by the default client: a 301/302/303 would turn
//     the POST into a GET whose 2xx would ack an event nobody received, so every 3xx is a
//     failed attempt that names the status. The error wraps a *StatusError with the status
//     and the first 256 bytes of the answer; 410 Gone is not special (it parks like any
//     other failure, where an operator sees it).
//   - Webhook.Timeout (default 10s) bounds one attempt from dialing to the response headers
//     and the start of the body; a timeout wraps context.DeadlineExceeded. The caller's
//     context still applies.
//   - Errors name the event id and the URL after httppoll.RedactURL (userinfo, fragment and
//     sensitive query values hidden); *url.Error is unwrapped because its message repeats the
//     raw URL. A secret in the URL path (Slack-style hook URLs) cannot be told apart from a
//     path and is shown.
//   - A receiver verifies with package webhook (Verifier, Middleware), which signs for the
//     sink too.
//   - Stream writes the fields "id" then "event" (the envelope). MaxLen > 0 trims with
//     MAXLEN ~ (approximate, cheap: whole nodes only, so the stream holds at least MaxLen
//     entries and less than MaxLen plus one node, 100 entries by default). Trimming does
//     not care whether a reader's group has read an entry, so MaxLen must cover the slowest
//     reader's lag; 0 keeps everything. This stream is an outlet for other programs, never
//     the engine's outbox, which is not trimmed by length.
//   - Stdout writes each line in one Write under a mutex, so lines of concurrent handlers never
//     interleave; a context that is already done writes nothing.
package sink
