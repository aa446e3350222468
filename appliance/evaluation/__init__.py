"""`appliance eval`: answer quality and citation faithfulness on a question set with its corpus."""
