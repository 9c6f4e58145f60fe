// Package watukuytype holds watukuy's vocabulary: the types a program that embeds watukuy
// meets (Poller, Page, Event, Handler, Key, the reports Inspect and Tick return, the hooks,
// the errors) and typed constants for lanes, statuses, circuit states, outcomes, handler
// results and error codes. The engine (package watukuy) and its internal packages share them,
// the way River keeps rivertype: a leaf package that imports nothing of the engine, so
// sinks, HTTP helpers and user code can depend on it alone. Package watukuy re-exports the
// main types under the same names.
package watukuytype
