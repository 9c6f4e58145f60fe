package httppoll

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"
)

// JSONError is a JSON syntax error with the byte offset where it was found. Offset follows
// encoding/json's SyntaxError: the number of bytes read when the error was detected, so the
// offending byte is body[Offset-1]; for a body that ends too early it is len(body).
type JSONError struct {
	Offset int64
	Msg    string
	// ContentType is set when the body is not JSON by its kind, not a broken JSON value
	// (Response.CheckJSON): the response's media type when it is not a JSON one (text/html,
	// text/plain), or "HTML" for a body that starts with a tag under a JSON or no
	// Content-Type. Start is then the start of the body, for the message.
	ContentType string
	Start       string
}

// Error reads "invalid JSON at byte offset <Offset>: <Msg>", or for a body of another kind
// "the response is <ContentType>, not JSON: it starts <Start>".
func (e *JSONError) Error() string {
	if e.ContentType != "" {
		return fmt.Sprintf("the response is %s, not JSON: it starts %q", e.ContentType, e.Start)
	}
	return fmt.Sprintf("invalid JSON at byte offset %d: %s", e.Offset, e.Msg)
}

// startLen bounds JSONError.Start: enough for a page's doctype and title.
const startLen = 80

// CheckJSON is CheckJSON of the response's body that names a body of another kind by its
// Content-Type: an HTML page answered with 200 (a login page, a proxy's error page) fails as
// "the response is text/html, not JSON" rather than as a syntax error at '<'. A body that
// starts like JSON keeps the syntax error, whatever its label.
func (r *Response) CheckJSON() error {
	err := CheckJSON(r.Body)
	var je *JSONError
	if !errors.As(err, &je) {
		return err
	}
	ct := r.Header.Get("Content-Type")
	mt, _, perr := mime.ParseMediaType(ct)
	if perr != nil {
		mt = strings.ToLower(strings.TrimSpace(ct))
	}
	body := bytes.TrimSpace(r.Body)
	switch {
	case len(body) == 0 || bytes.IndexByte([]byte(`{["-0123456789tfn`), body[0]) >= 0:
		return err // broken JSON, whatever the label: its position says more
	case mt != "" && mt != "application/json" && !strings.HasSuffix(mt, "+json"):
		je.ContentType = mt
	case bytes.HasPrefix(body, []byte("<")):
		je.ContentType = "HTML"
	default:
		return err
	}
	if len(body) > startLen {
		body = body[:startLen]
	}
	je.Start = strings.ToValidUTF8(string(body), "")
	return je
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
