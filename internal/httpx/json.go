package httpx

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// JSONError is a JSON syntax error with the byte offset where it was found. Offset follows
// encoding/json's SyntaxError: the number of bytes read when the error was detected, so the
// offending byte is body[Offset-1]; for a body that ends too early it is len(body).
type JSONError struct {
	Offset int64
	Msg    string
}

// Error reads "invalid JSON at byte offset <Offset>: <Msg>".
func (e *JSONError) Error() string {
	return fmt.Sprintf("invalid JSON at byte offset %d: %s", e.Offset, e.Msg)
}

// CheckJSON returns nil when body is exactly one valid JSON value (surrounding whitespace
// allowed), and a *JSONError otherwise. Pollers call it before handing a body to gjson, which
// does not validate, so a truncated or HTML answer fails loudly with a position instead of
// yielding empty pages.
func CheckJSON(body []byte) error {
	if json.Valid(body) {
		return nil
	}
	var raw json.RawMessage
	err := json.Unmarshal(body, &raw)
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		// json.Valid said no, so Unmarshal must fail with a SyntaxError; be safe anyway.
		return &JSONError{Offset: 0, Msg: fmt.Sprint(err)}
	}
	if se.Offset == int64(len(body)) && strings.HasPrefix(se.Error(), "invalid character ' '") &&
		(len(body) == 0 || body[len(body)-1] != ' ') {
		// At the end encoding/json feeds a virtual space, which reads as "invalid character
		// ' '" for a cut-off literal (e.g. "nul" or "1."); say what it is: an early end.
		return &JSONError{Offset: se.Offset, Msg: "unexpected end of JSON input"}
	}
	return &JSONError{Offset: se.Offset, Msg: se.Error()}
}
