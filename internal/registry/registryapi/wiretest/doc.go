// Package wiretest holds what the registry's codec fuzzers and its
// handler fuzzer share: the seed documents, a hang watchdog and an XML
// well-formedness check. Tests only.
package wiretest
