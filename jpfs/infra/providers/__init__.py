"""Model providers: one ``complete`` call per model turn; the tool loop lives in the runtime."""
