package core

import (
	"strings"

	"github.com/watukuy/watukuy/watukuytype"
)

// keyError is what an operation on one key failed with: "<op> <key>[<at>]: <cause>", the key
// named as the CLI flags name it (Key.Describe). It says each thing once: the errors that
// concern one key (HTTPError, LeaseLostError, a request's error) start with "watukuy: <key>: "
// themselves, and that start is dropped from the cause.
type keyError struct {
	op  string // "watukuy: probe", "live lane of"
	key watukuytype.Key
	at  string // after the key, e.g. ` at cursor "c1"`
	err error
}

// keyErr wraps err (nil stays nil) as op's failure on key.
func keyErr(op string, key watukuytype.Key, err error) error {
	if err == nil {
		return nil
	}
	return &keyError{op: op, key: key, err: err}
}

func (e *keyError) Error() string {
	return e.op + " " + e.key.Describe() + e.at + ": " + causeOf(e.err, e.key)
}

func (e *keyError) Unwrap() error { return e.err }

// causeOf is err's message without the "watukuy: " and the key it may start with.
func causeOf(err error, key watukuytype.Key) string {
	msg := strings.TrimPrefix(err.Error(), "watukuy: ")
	return strings.TrimPrefix(msg, key.Describe()+": ")
}
