"""Official-scorer metrics, no torch: squad (EM/F1), classification (F1, MCC, correlations, conlleval), coref (MUC, B3, CEAF)."""
