package deploy

// Exported for the external tests in deploy_test (which may import labtest).
var (
	TmpPrefix = tmpPrefix
	Alive     = alive
	ListLinks = listLinks
)
