// Package core is the engine: the cycle runner, the dispatcher, the lease keeper and the Store
// interface they drive. It knows nothing of Redis, asynq or the network (a test enforces it);
// internal/redisstore implements Store. The vocabulary it shares with users (pollers, events,
// keys, reports, errors) is the public package watukuytype.
package core
