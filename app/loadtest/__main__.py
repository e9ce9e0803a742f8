from app.loadtest import main

main()
