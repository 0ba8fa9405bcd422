package restgateway

import (
	"reflect"
	"testing"
)

// The creations clients send take the hand-written path; the rest go to
// encoding/json.
func TestDecodeCreateTakes(t *testing.T) {
	for _, tc := range []struct {
		body string
		fast bool
	}{
		{`{"processDefinitionId":"bench"}`, true},
		{` { "processDefinitionId" : "order-process" , "processDefinitionVersion" : -1 , "tenantId":"<default>",` + "\n" + `"variables":{"n":1,"s":"a\"b}","l":[{"x":null}]}}`, true},
		{`{"processDefinitionKey":"2251799813685249","variables":null,"tags":["a","b"],"awaitCompletion":true,"requestTimeout":20000,"fetchVariables":[]}`, true},
		{`{"processDefinitionId":"ünïcode","operationReference":42,"tags":null}`, true},
		{`{}`, true},
		{`{"processDefinitionId":"a\"b"}`, false},            // an escape: encoding/json unescapes
		{`{"ProcessDefinitionId":"x"}`, false},               // other case: encoding/json matches it
		{`{"processDefinitionId":null}`, false},              // null for a string
		{`{"processDefinitionVersion":1.0}`, false},          // not an integer
		{`{"processDefinitionVersion":4294967296}`, false},   // past int32
		{`{"processDefinitionKey":2251799813685249}`, false}, // a key as a number: encoding/json's error
		{`{"variables":[1]}`, false},                         // not an object
		{`{"variables":{"a":}}`, false},                      // not JSON
		{`{"startInstructions":[{"elementId":"t"}]}`, false}, // not in the fast path
		{`{"processDefinitionId":"x"} {}`, false},            // two values
		{`{"processDefinitionId":"x",}`, false},              // trailing comma
		{`{"processDefinitionId":"x"`, false},                // cut short
		{"{\"processDefinitionId\":\"\xff\"}", false},        // invalid UTF-8: encoding/json replaces it
		{`{"awaitCompletion":"true"}`, false},                // a string for a bool
		{`{"requestTimeout":01}`, false},                     // a leading zero is not JSON
	} {
		var in createInstance
		if got := decodeCreate([]byte(tc.body), &in); got != tc.fast {
			t.Errorf("decodeCreate(%s) = %v, want %v", tc.body, got, tc.fast)
		}
		if tc.fast {
			assertAsEncodingJSON(t, []byte(tc.body), in)
		}
	}
}

// assertAsEncodingJSON: what the fast path read, encoding/json reads
// the same from the same body.
func assertAsEncodingJSON(t *testing.T, body []byte, fast createInstance) {
	t.Helper()
	var slow createInstance
	if err := unmarshal(body, &slow); err != nil {
		t.Fatalf("the fast path took %q, encoding/json refuses it: %v", body, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q: the fast path read %+v, encoding/json %+v", body, fast, slow)
	}
}

// FuzzDecodeCreate: whatever the fast path takes, encoding/json takes
// and reads the same.
func FuzzDecodeCreate(f *testing.F) {
	for _, s := range []string{
		`{"processDefinitionId":"bench"}`,
		`{"processDefinitionKey":"1","variables":{"a":[1,{"b":"}"}]},"tags":["x"],"awaitCompletion":false}`,
		`{"processDefinitionVersion":-0,"operationReference":9223372036854775807,"requestTimeout":-5,"fetchVariables":null}`,
		`{"variables":null,"tenantId":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var in createInstance
		if decodeCreate(body, &in) {
			assertAsEncodingJSON(t, body, in)
		}
	})
}
