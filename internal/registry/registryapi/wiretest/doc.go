// Package wiretest holds what the registry's codec fuzzers and its
// handler fuzzer share: the seed documents, a hang watchdog and an XML
// well-formedness check. Tests only.
// Tests only: no runtime or tool imports it outside its tests.
package wiretest
