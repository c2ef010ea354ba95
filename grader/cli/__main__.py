from grader.cli.app import entry

entry()
