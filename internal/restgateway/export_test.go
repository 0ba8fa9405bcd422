package restgateway

// What the package's external tests look at inside.
type CreatedInstanceForTest = createdInstance

func AppendCreatedForTest(c createdInstance) []byte { return c.appendJSON(nil) }
