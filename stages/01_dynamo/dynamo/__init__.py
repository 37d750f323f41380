"""dynamo (stage package; see README.md beside this folder)."""
