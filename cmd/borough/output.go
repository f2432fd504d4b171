package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// The output formats of the commands that print what they found: text for
// people, json for scripts (one object, its fields named as in the text).
const (
	outputText = "text"
	outputJSON = "json"
)

// addOutput adds -o/--output to c, into o.
func addOutput(c *cobra.Command, o *string) {
	c.Flags().StringVarP(o, "output", "o", outputText, "text, or json for scripts")
}

// checkOutput refuses an output format that is neither.
func checkOutput(o string) error {
	if o != outputText && o != outputJSON {
		return fmt.Errorf("-o %q: want text or json", o)
	}
	return nil
}

// printJSON prints v as indented JSON.
func printJSON(stdout io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}
