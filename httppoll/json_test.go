package httppoll

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestCheckJSON(t *testing.T) {
	for _, tc := range []struct {
		body   string
		ok     bool
		offset int64
		msg    string
	}{
		{body: `{"a":1}`, ok: true},
		{body: " [1, 2, {\"b\": null}]\n", ok: true},
		{body: `"just a string"`, ok: true},
		{body: `{"a":1,}`, offset: 8, msg: "invalid character '}' looking for beginning of object key string"},
		{body: `{"a" 1}`, offset: 6, msg: "invalid character '1' after object key"},
		{body: `{} {}`, offset: 4, msg: "invalid character '{' after top-level value"},
		{body: `[1,2]]`, offset: 6, msg: "invalid character ']' after top-level value"},
		{body: `<html>oops</html>`, offset: 1, msg: "invalid character '<' looking for beginning of value"},
		{body: `{"a":1`, offset: 6, msg: "unexpected end of JSON input"},
		{body: `nul`, offset: 3, msg: "unexpected end of JSON input"},
		{body: `[1.`, offset: 3, msg: "unexpected end of JSON input"},
		{body: `nul `, offset: 4, msg: "invalid character ' ' in literal null (expecting 'l')"},
		{body: `   `, offset: 3, msg: "unexpected end of JSON input"},
		{body: ``, offset: 0, msg: "unexpected end of JSON input"},
	} {
		err := CheckJSON([]byte(tc.body))
		if tc.ok {
			if err != nil {
				t.Errorf("CheckJSON(%q) = %v; want nil", tc.body, err)
			}
			continue
		}
		var je *JSONError
		if !errors.As(err, &je) {
			t.Errorf("CheckJSON(%q) = %v; want *JSONError", tc.body, err)
			continue
		}
		if je.Offset != tc.offset || je.Msg != tc.msg {
			t.Errorf("CheckJSON(%q) = {%d %q}; want {%d %q}", tc.body, je.Offset, je.Msg, tc.offset, tc.msg)
		}
	}
	want := "invalid JSON at byte offset 8: invalid character '}' looking for beginning of object key string"
	if got := CheckJSON([]byte(`{"a":1,}`)).Error(); got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
}

// Response.CheckJSON names a body of another kind by its Content-Type (or as HTML), and keeps
// the syntax error for a body that starts like JSON, whatever its label.
func TestResponseCheckJSON(t *testing.T) {
	for _, tc := range []struct {
		ct, body, want string
	}{
		{ct: "application/json", body: `{"a":1}`},
		{ct: "text/html; charset=utf-8", body: "\n<!DOCTYPE html><title>Sign in</title>", want: `the response is text/html, not JSON: it starts "<!DOCTYPE html><title>Sign in</title>"`},
		{ct: "application/json", body: `<html>oops</html>`, want: `the response is HTML, not JSON: it starts "<html>oops</html>"`},
		{body: `<html>oops</html>`, want: `the response is HTML, not JSON: it starts "<html>oops</html>"`},
		{ct: "text/plain", body: `OK`, want: `the response is text/plain, not JSON: it starts "OK"`},
		{ct: "text/plain", body: `{"a":`, want: "invalid JSON at byte offset 5: unexpected end of JSON input"},
		{ct: "text/html", body: ``, want: "invalid JSON at byte offset 0: unexpected end of JSON input"},
		{ct: "text/html", body: "<p>" + strings.Repeat("x", 100), want: `the response is text/html, not JSON: it starts "<p>` + strings.Repeat("x", 77) + `"`},
	} {
		r := &Response{Header: http.Header{}, Body: []byte(tc.body)}
		if tc.ct != "" {
			r.Header.Set("Content-Type", tc.ct)
		}
		err := r.CheckJSON()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s %q: %v; want nil", tc.ct, tc.body, err)
			}
			continue
		}
		var je *JSONError
		if !errors.As(err, &je) || err.Error() != tc.want {
			t.Errorf("%s %q: %v; want *JSONError %q", tc.ct, tc.body, err, tc.want)
		}
	}
}
