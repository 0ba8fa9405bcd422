// Package yamlfile reads the YAML files operators write (gates, query
// presets, the proxy's configuration) strictly: an unknown or misspelt
// key is an error, and every error names the file, the line and the
// column, on one line, as a compiler would. Struct fields
// are named by their json tags, so one type serves JSON and YAML.
// It imports nothing of this module.
package yamlfile

import (
	"errors"
	"fmt"
	"os"

	"github.com/goccy/go-yaml"
)

// Read reads the file at path into v.
func Read(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return Decode(path, data, v)
}

// Decode reads data, the content of the file name, into v.
func Decode(name string, data []byte, v any) error {
	err := yaml.UnmarshalWithOptions(data, v, yaml.Strict(), yaml.UseJSONUnmarshaler())
	if err == nil {
		return nil
	}
	var ye yaml.Error
	if !errors.As(err, &ye) || ye.GetToken() == nil {
		// A field's own decoder (a duration, say) failed: its message
		// stands, without a position.
		return fmt.Errorf("%s: %w", name, err)
	}
	pos := ye.GetToken().Position
	return &Error{File: name, Line: pos.Line, Column: pos.Column, Message: ye.GetMessage()}
}

// Error is a YAML file's mistake at a place.
type Error struct {
	File         string
	Line, Column int
	Message      string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Message)
}
